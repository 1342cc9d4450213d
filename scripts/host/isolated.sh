#!/bin/sh
# Runs a command in a fresh network namespace that has only a loopback interface, so the
# host CLIs it starts (and everything they start) can reach 127.0.0.1 and nothing else.
# That needs root (or CAP_SYS_ADMIN) and `ip`; without them the command runs as it is, and
# the tests rely on the environment flags that keep Claude Code off the network.
#
#   sh scripts/host/isolated.sh <command> [args...]
if unshare -n sh -c 'ip link set lo up' >/dev/null 2>&1; then
  exec unshare -n sh -c 'ip link set lo up && export INTERLINK_HOST_NETNS=1 && exec "$@"' sh "$@"
fi
echo "host tests: no network namespace (needs root and ip); relying on the environment flags" >&2
exec "$@"
