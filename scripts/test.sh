#!/usr/bin/env bash
# Runs every test. Installs what the tests need when it is missing.
# Must run as root (the isolation tests build real sandboxes); under
# CI=true an isolation test that would skip fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v unshare >/dev/null || need+=(util-linux)
# Headless Chromium drives the approval console's browser test.
command -v chromium >/dev/null || need+=(chromium)
command -v node >/dev/null || need+=(nodejs)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
	echo "installing: ${need[*]}"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The real agent the e2e tests run contained: Claude Code, pinned (see
# ../shared/recipes.md: 2.1.328 runs on this machine kind).
claude_dir=${CORDON_TEST_CLAUDE_DIR:-/opt/cordon-test/claude}
if [ ! -x "$claude_dir/node_modules/@anthropic-ai/claude-code/bin/claude.exe" ]; then
	command -v npm >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	mkdir -p "$claude_dir"
	(cd "$claude_dir" && npm install --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code@2.1.328)
fi
# The upstream MCP server nobody here wrote, pinned: the tool broker's e2e
# tests run it contained on the trusted side.
mcpfs_dir=${CORDON_TEST_MCPFS_DIR:-/opt/cordon-test/mcpfs}
if [ ! -f "$mcpfs_dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ]; then
	command -v npm >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	mkdir -p "$mcpfs_dir"
	(cd "$mcpfs_dir" && npm install --no-audit --no-fund --loglevel=error @modelcontextprotocol/server-filesystem@2026.8.31)
fi
command -v curl >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; }

go version
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
# The e2e package builds sandboxes; packages run one at a time so the
# isolation tests do not starve each other on small machines.
go test -count=1 -p 1 -timeout 20m ./...
