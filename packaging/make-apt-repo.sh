#!/bin/sh
# Make a local file-based apt repository from the built .deb and point apt at it,
# so that "apt-get install swtel" works.
#
#   packaging/make-apt-repo.sh [REPO_DIR]     (default: packaging/out/apt)
#   packaging/make-apt-repo.sh --remove       (drop the apt source again)
#
# It writes /etc/apt/sources.list.d/swtel-local.list with
#   deb [trusted=yes] file:REPO_DIR ./
# "trusted=yes" because the repository is unsigned and local; do not use it for
# a repository that other machines fetch.
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

list=/etc/apt/sources.list.d/swtel-local.list
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = "--remove" ]; then
	rm -f "$list"
	exit 0
fi

repo=${1:-$here/packaging/out/apt}
mkdir -p "$repo"
repo=$(cd "$repo" && pwd)

set -- "$here"/packaging/out/swtel_*.deb
[ -e "$1" ] || { echo "make-apt-repo: no packaging/out/swtel_*.deb; run packaging/build-deb.sh" >&2; exit 1; }

rm -f "$repo"/*.deb
cp "$@" "$repo"/
cd "$repo"
dpkg-scanpackages --multiversion . /dev/null > Packages 2>/dev/null
gzip -9nc Packages > Packages.gz
if command -v apt-ftparchive >/dev/null 2>&1; then
	apt-ftparchive -o APT::FTPArchive::Release::Origin=swtel-local \
		-o APT::FTPArchive::Release::Label=swtel-local release . > Release
fi
# apt reads file: repositories as the unprivileged _apt user where it can.
chmod -R a+rX "$repo"

echo "deb [trusted=yes] file:$repo ./" > "$list"
# Refresh only this source: quick, and independent of the network.
apt-get update -q -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
	-o APT::Get::List-Cleanup=0
echo "make-apt-repo: $list -> $repo"
grep -E '^(Package|Version|Architecture):' Packages
