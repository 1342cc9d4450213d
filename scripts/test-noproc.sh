#!/bin/sh
# Runs a command as on a system without /proc (macOS, the BSDs): in a private mount
# namespace whose /proc is an empty read-only tmpfs, so neither the command nor any
# process it starts can see /proc, while the rest of the machine keeps it. Sets
# INTERLINK_TEST_NOPROC=1 inside, which the tests check against what they see
# (test/helpers/noproc.ts), so this run can never quietly test the normal path.
# Needs root (or CAP_SYS_ADMIN) and util-linux `unshare` where /proc exists; where it
# does not (macOS), the command simply runs. Fails rather than run with /proc visible.
#
#   sh scripts/test-noproc.sh <command> [args...]
set -eu
if [ ! -e /proc/self/stat ]; then
  INTERLINK_TEST_NOPROC=1 exec "$@"
fi
if ! unshare --mount --propagation private sh -c 'mount -t tmpfs -o ro none /proc' >/dev/null 2>&1; then
  echo "test:noproc: cannot hide /proc (needs root or CAP_SYS_ADMIN, and unshare)" >&2
  exit 1
fi
exec unshare --mount --propagation private sh -c 'mount -t tmpfs -o ro none /proc && INTERLINK_TEST_NOPROC=1 exec "$@"' sh "$@"
