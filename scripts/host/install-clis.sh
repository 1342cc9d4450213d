#!/usr/bin/env bash
# Installs the host CLIs the host tests drive, at pinned versions, into a cache directory
# outside git (default: .cache/host-clis/ in this checkout; override with HOST_CLIS_DIR).
# Idempotent: does nothing when the pinned version already answers `--version`.
#
# The platform binary comes from an optional dependency and is put in place by the
# package's postinstall, so this never passes --omit=optional or --ignore-scripts.
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.197

root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${HOST_CLIS_DIR:-$root/.cache/host-clis}"
claude="$dir/node_modules/.bin/claude"

installed_version() {
  [ -x "$claude" ] || return 0
  # "2.1.197 (Claude Code)"; a stub left by a skipped postinstall prints something else or fails.
  "$claude" --version 2>/dev/null | awk '{print $1; exit}' || true
}

if [ "$(installed_version)" = "$CLAUDE_CODE_VERSION" ]; then
  echo "host CLIs: claude $CLAUDE_CODE_VERSION already in $dir"
  exit 0
fi

mkdir -p "$dir"
cd "$dir"
if [ ! -f package.json ]; then
  printf '{\n  "name": "interlink-host-clis",\n  "private": true\n}\n' > package.json
fi
echo "host CLIs: installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $dir"
npm install --no-audit --no-fund --save-exact "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"

version="$(installed_version)"
if [ "$version" != "$CLAUDE_CODE_VERSION" ]; then
  echo "host CLIs: $claude --version gave '${version:-nothing}', expected $CLAUDE_CODE_VERSION" >&2
  exit 1
fi
echo "host CLIs: $("$claude" --version)"
