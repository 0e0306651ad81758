#!/bin/bash
# tests/systemd/sandbox.sh CMD [ARGS...]
#
# Boot a real systemd as PID 1 of a systemd-nspawn container whose root is a RAM-backed overlay of this machine's own
# / (no download, same interpreters and venvs), then run CMD in a private mount namespace where plain `systemctl` and
# `journalctl` talk to that systemd. The directories the service code writes (SBX_SHARED_DIRS) are bound over with
# scratch copies, so nothing on the real / changes; everything is undone when CMD exits.
# docs/systemd.md ("Testing against a real systemd") explains the recipe.
#
# Needs: root; apt-get install -y systemd systemd-container.
# Exports to CMD: SBX_LEADER (host pid of the container's PID 1), SYSTEMCTL_FORCE_BUS=1, DBUS_SYSTEM_BUS_ADDRESS.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "sandbox.sh: must run as root" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

if [ -z "${SBX_INNER:-}" ]; then
  export SBX_INNER=1
  exec unshare --mount --propagation private -- "$0" "$@"
fi

# One sandbox at a time per host: the shared directories below are made on the real root when missing and removed
# again on exit, so two sandboxes running together would pull them from under each other.
exec 9>"${TMPDIR:-/tmp}/kimi-serve-sandbox.lock"
flock 9

SHARED=${SBX_SHARED_DIRS:-/etc/systemd/system /var/log/journal /etc/kimi-serve /var/lib/kimi-serve}
MASK=${SBX_MASK:-postgresql.service}
BOOT_TIMEOUT=${SBX_BOOT_TIMEOUT:-60}

W=$(mktemp -d /tmp/kimi-serve-sandbox.XXXXXX)
NSPAWN=""; L=""; CREATED=""
cleanup() {
  if [ -n "$NSPAWN" ]; then
    { [ -n "$L" ] && nsenter -t "$L" -a systemctl poweroff >/dev/null 2>&1; } || kill -TERM "$NSPAWN" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$NSPAWN" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$NSPAWN" 2>/dev/null && kill -KILL "$NSPAWN" 2>/dev/null
    wait "$NSPAWN" 2>/dev/null || true
    for h in systemd unified; do  # nspawn without a host systemd leaves empty cgroups behind
      rmdir /sys/fs/cgroup/$h/payload/init.scope /sys/fs/cgroup/$h/payload /sys/fs/cgroup/$h/supervisor 2>/dev/null || true
    done
  fi
  umount -l "$W" 2>/dev/null || true
  rmdir "$W" 2>/dev/null || true
  # directories created on the real / for bind mount points (the binds themselves die with this namespace)
  for d in $CREATED; do umount -l "$d" 2>/dev/null || true; rmdir "$d" 2>/dev/null || true; done
}
trap cleanup EXIT

mount -t tmpfs -o size=4g,mode=700 kimi-sbx "$W"
mkdir -p "$W/upper" "$W/work" "$W/root" "$W/scratch"
# nspawn keeps lock and propagation dirs in /run/systemd and will not clean them on a non-tmpfs /run;
# systemctl also needs /run/systemd/system to exist (its "booted with systemd" test).
mount -t tmpfs -o mode=755 kimi-sbx-run /run/systemd
mkdir -p /run/systemd/system

bind_args=()
for d in $SHARED; do
  if [ ! -d "$d" ]; then mkdir -p "$d"; CREATED="$d $CREATED"; fi
  s="$W/scratch$d"; mkdir -p "$s"; cp -a "$d/." "$s/"
  mount --bind "$s" "$d"
  bind_args+=("--bind=$d")
done
for d in ${SBX_BIND:-}; do bind_args+=("--bind=$d"); done
mount -t overlay kimi-sbx-root -o "lowerdir=/,upperdir=$W/upper,workdir=$W/work" "$W/root"

mask_args=()
for u in $MASK; do mask_args+=("systemd.mask=$u"); done

t0=$(date +%s%N)
systemd-nspawn --quiet --boot --directory="$W/root" --machine="kimi-sbx-$$" --register=no --keep-unit --console=pipe \
  "${bind_args[@]}" -- "${mask_args[@]}" >"$W/console.log" 2>&1 &
NSPAWN=$!
for _ in $(seq 1 300); do
  L=$(ps -o pid= --ppid "$NSPAWN" 2>/dev/null | head -1 | tr -d ' ' || true)
  [ -n "$L" ] && [ -S "/proc/$L/root/run/dbus/system_bus_socket" ] && break
  kill -0 "$NSPAWN" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$L" ] || [ ! -S "/proc/$L/root/run/dbus/system_bus_socket" ]; then
  echo "sandbox.sh: the container's systemd did not come up:" >&2; cat "$W/console.log" >&2; exit 1
fi
state=$(timeout "$BOOT_TIMEOUT" nsenter -t "$L" -a systemctl is-system-running --wait || true)
echo "sandbox.sh: systemd is PID 1 (host pid $L), state $state, boot $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2

# nspawn gives the container its own boot id; let host-side systemctl/journalctl see the same one.
cat "/proc/$L/root/proc/sys/kernel/random/boot_id" > "$W/boot_id"
mount --bind "$W/boot_id" /proc/sys/kernel/random/boot_id

export SBX_LEADER=$L SYSTEMCTL_FORCE_BUS=1
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=/proc/$L/root/run/dbus/system_bus_socket"
rc=0
"$@" || rc=$?
exit $rc
