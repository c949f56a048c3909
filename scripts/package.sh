#!/usr/bin/env bash
# Builds dist/cordon_<version>_<arch>.deb from this tree (docs/packaging.md):
# the static binary with its version and commit stamped, the systemd unit,
# man pages and shell completions generated from the binary's own command
# tree, and the copyright file, packed by nfpm (packaging/mkdeb, its own
# Go module). Prints the path of the package on its last line.
#
#   VERSION  Debian version (default: from git, e.g. 0.0~git20261201.041120b)
#   GOARCH   target architecture (default: the host's)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0

arch=${GOARCH:-$(go env GOARCH)}
commit=$(git rev-parse --short=7 HEAD)
# Reproducible: the build time is the commit's time unless set.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
if [ -z "${VERSION:-}" ]; then
	if tag=$(git describe --tags --exact-match 2>/dev/null); then
		VERSION=${tag#v}
	else
		VERSION="0.0~git$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d).$commit"
	fi
	git diff --quiet HEAD -- 2>/dev/null || VERSION="$VERSION+dirty"
fi
case $VERSION in
[0-9]*) ;;
*) echo "package.sh: VERSION $VERSION must start with a digit (Debian)" >&2; exit 1 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# gen writes only into a directory no one else may write (0755 whatever the umask).
mkdir -m 0755 "$stage/man" "$stage/completions"
mkdir -p dist

# -buildvcs=true records vcs.revision (the commit `cordon --version`
# prints); GOFLAGS may turn it off for the test builds.
built=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# cli.Commit covers builds where Go records no vcs.revision
# (GOFLAGS=-buildvcs=false, or no git checkout); the revision Go records,
# when it does, wins.
cli=github.com/cordon-project/cordon/internal/cli
ldflags="-s -w -X $cli.Version=$VERSION -X $cli.BuildTime=$built -X $cli.Commit=$(git rev-parse HEAD)"
GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=true -ldflags "$ldflags" -o "$stage/cordon" ./cmd/cordon

# The man pages and completions come from the command tree; a binary for
# this host generates them (the packaged one when the arch matches).
gen=$stage/cordon
if [ "$arch" != "$(go env GOHOSTARCH)" ]; then
	gen=$stage/cordon-host
	go build -trimpath -buildvcs=true -ldflags "$ldflags" -o "$gen" ./cmd/cordon
fi
"$gen" gen man "$stage/man"
"$gen" gen completions "$stage/completions"
gzip -9n "$stage"/man/*.1
cp dist/systemd/cordon.service "$stage/cordon.service"

out=$PWD/dist/cordon_${VERSION}_${arch}.deb
(cd packaging && VERSION=$VERSION ARCH=$arch STAGE=$stage go run ./mkdeb -config nfpm.yaml -out "$out")
echo "$out"
