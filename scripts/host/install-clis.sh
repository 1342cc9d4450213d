#!/usr/bin/env bash
# Installs the host CLIs the host tests drive, at pinned versions, into a cache directory
# outside git (default: .cache/host-clis/ in this checkout; override with HOST_CLIS_DIR).
# Idempotent: does nothing when the pinned versions already answer `--version`.
#
# Each platform binary comes from an optional dependency (put in place by the package's
# postinstall for Claude Code), so this never passes --omit=optional or --ignore-scripts.
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.197
CODEX_VERSION=0.171.0

root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${HOST_CLIS_DIR:-$root/.cache/host-clis}"
claude="$dir/node_modules/.bin/claude"
codex="$dir/node_modules/.bin/codex"

claude_version() {
  [ -x "$claude" ] || return 0
  # "2.1.197 (Claude Code)"; a stub left by a skipped postinstall prints something else or fails.
  "$claude" --version 2>/dev/null | awk '{print $1; exit}' || true
}

codex_version() {
  [ -x "$codex" ] || return 0
  # "codex-cli 0.171.0"
  "$codex" --version 2>/dev/null | awk '{print $2; exit}' || true
}

if [ "$(claude_version)" = "$CLAUDE_CODE_VERSION" ] && [ "$(codex_version)" = "$CODEX_VERSION" ]; then
  echo "host CLIs: claude $CLAUDE_CODE_VERSION and codex $CODEX_VERSION already in $dir"
  exit 0
fi

mkdir -p "$dir"
cd "$dir"
if [ ! -f package.json ]; then
  printf '{\n  "name": "interlink-host-clis",\n  "private": true\n}\n' > package.json
fi
echo "host CLIs: installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION and @openai/codex@$CODEX_VERSION into $dir"
npm install --no-audit --no-fund --save-exact "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION"

status=0
if [ "$(claude_version)" != "$CLAUDE_CODE_VERSION" ]; then
  echo "host CLIs: $claude --version gave '$(claude_version)', expected $CLAUDE_CODE_VERSION" >&2
  status=1
fi
if [ "$(codex_version)" != "$CODEX_VERSION" ]; then
  echo "host CLIs: $codex --version gave '$(codex_version)', expected $CODEX_VERSION" >&2
  status=1
fi
[ "$status" -eq 0 ] || exit 1
echo "host CLIs: $("$claude" --version); $("$codex" --version 2>/dev/null)"
