#!/bin/sh
# Build the swtel .deb from a clean copy of this tree into packaging/out/.
#
#   packaging/build-deb.sh [--install-deps]
#
# The copy holds the files git tracks plus untracked, non-ignored ones (so
# uncommitted work is built, but never build/, *.so or other ignored output).
# --install-deps runs "apt-get build-dep ./" on the copy first (needs root).
# SWTEL_WHEELHOUSE=/dir builds offline from a directory holding the pinned
# pygnmi and opentelemetry-proto wheels (see debian/vendor-requirements.txt).
set -eu

# Debian's tools only: a pyenv/venv python3 first in PATH must not build it.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/packaging/out"
install_deps=no
[ "${1:-}" = "--install-deps" ] && install_deps=yes

work=$(mktemp -d /tmp/swtel-build.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
src="$work/swtel"
mkdir -p "$src"

if git -C "$here" rev-parse --git-dir >/dev/null 2>&1; then
	git -C "$here" ls-files -z --cached --others --exclude-standard |
		(cd "$here" && xargs -0 sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh) |
		(cd "$here" && tar --null -T - -cf -) | tar -xf - -C "$src"
else
	echo "build-deb: $here is not a git checkout; copying it whole" >&2
	cp -a "$here/." "$src/"
	rm -rf "$src/packaging/out" "$src/build"
fi

if [ "$install_deps" = yes ]; then
	(cd "$src" && DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q ./)
fi

start=$(date +%s)
(cd "$src" && dpkg-buildpackage -us -uc -b)
end=$(date +%s)

mkdir -p "$out"
rm -f "$out"/swtel_*
cp "$work"/swtel_*.deb "$work"/swtel_*.changes "$work"/swtel_*.buildinfo "$out"/
for f in "$work"/swtel-dbgsym_*.deb; do [ -e "$f" ] && cp "$f" "$out"/; done
echo "build-deb: built in $((end - start)) s:"
ls -l "$out"/swtel_*.deb
