"""What a service command acts on, resolved once at the command's edge: the profile (its ``--set`` overrides applied),
the unit (``--unit-name``, else the profile's ``service.unit_name``, else the default), the root and its systemd.

`install-service`, `uninstall-service`, `restart` and `status` build one :class:`ServiceTarget` from their options and
hand it down: planning, the rollback of an interrupted change and the report all see the same profile and the same unit
name, and nothing below the commands loads a profile by its name again.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimi_serve.profile.loader import Profile
from kimi_serve.profile.schema import SECTIONS
from kimi_serve.profile.topology import routed
from kimi_serve.service.member_units import installed_members
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.unit import unit_file_name


@dataclass(frozen=True)
class ServiceTarget:
    profile: Profile | None  # None: a command given only --unit-name (uninstall-service, status)
    unit: str  # NAME.service: the one unit, or a replicated deployment's base name (NAME-r0, ..., NAME-router)
    systemd: Systemd

    @property
    def paths(self) -> ServicePaths:
        """The one unit's files and records (a replicated deployment's members have their own)."""
        return ServicePaths(self.systemd.root, self.unit)

    @property
    def replicated(self) -> bool:
        """The profile is a routed deployment (replicas behind the router): what install and restart go by."""
        return self.profile is not None and routed(self.profile)

    @property
    def installed_as_deployment(self) -> bool:
        """The units under the root are a routed deployment's members: what uninstall and status go by."""
        return bool(installed_members(self.systemd.root, self.unit))


def unit_of(profile: Profile | None, unit_name: str | None) -> str:
    """The unit name a command's options mean: ``--unit-name``, else the (overridden) profile's, else the default."""
    if unit_name is not None:  # given, even empty: checked, never the default instead
        return unit_file_name(unit_name, "--unit-name")
    if profile is not None:
        return unit_file_name(profile.service.unit_name, profile.where("service.unit_name"))
    return unit_file_name(SECTIONS["service"]["unit_name"].default)


def resolve_target(profile: Profile | None, unit_name: str | None, systemd: Systemd) -> ServiceTarget:
    return ServiceTarget(profile, unit_of(profile, unit_name), systemd)
