"""The bounds of the scripted model's tool arguments (schema_values.py): whatever schema a client sends, one turn's
arguments take at most ``MAX_VALUES`` values, ``MAX_CHARS`` characters of strings and ``MAX_SECONDS`` of work. A
schema that needs more raises :class:`TooCostly`, a ValueError that SGLang's serving layer answers with 400 and its
message (docs/simulator.md "The scripted model")."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MAX_VALUES = 20_000  # values (objects, arrays, strings, numbers...) built for one turn's calls
MAX_CHARS = 1 << 20  # characters of generated strings in one turn (verify's largest probe asks for ~9 KB)
MAX_SECONDS = 3.0  # work on one turn's arguments (the generator checks it at each value it builds)
ENUM_TRIES = 16  # enum members validated before the first one is taken as it is


class TooCostly(ValueError):
    """The schema asks for more than the simulator builds within its bounds (a ValueError: SGLang's serving layer
    answers it with 400 and this message)."""


@dataclass
class ArgumentBudget:
    """What one turn's argument generation may still spend: values, characters and time."""

    values: int = MAX_VALUES
    chars: int = MAX_CHARS
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)

    def spend(self, values: int = 1, chars: int = 0) -> None:
        self.values -= values
        self.chars -= chars
        if self.values < 0:
            raise TooCostly(f"the arguments would need more than {MAX_VALUES} values (a schema without a finite end?)")
        if self.chars < 0:
            raise TooCostly(f"the arguments would need more than {MAX_CHARS} characters of strings")
        if time.monotonic() > self.deadline:
            raise TooCostly(f"building the arguments took more than {MAX_SECONDS:g} s")
