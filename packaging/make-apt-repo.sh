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
#
# apt reads a file: repository as its unprivileged sandbox user (_apt), which
# needs to enter every directory above REPO_DIR. When it cannot (a checkout in
# /root or under a 0700 "mktemp -d"), the repository is published as a copy in
# /srv/swtel-apt, world-readable, and the source points there instead; --remove
# deletes that copy again.
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

list=/etc/apt/sources.list.d/swtel-local.list
published=/srv/swtel-apt
marker=.made-by-swtel-make-apt-repo   # only a directory holding it is replaced or removed
here=$(cd "$(dirname "$0")/.." && pwd)

remove_published() {
	if [ -e "$published/$marker" ]; then rm -rf "$published"; fi
}

if [ "${1:-}" = "--remove" ]; then
	rm -f "$list"
	remove_published
	exit 0
fi

[ "$(id -u)" = 0 ] || { echo "make-apt-repo: must run as root (it writes $list)" >&2; exit 1; }

# can_apt_read DIR: whether apt's sandbox user can read DIR/Packages. With no
# such user, apt does not drop privileges and reads as root.
can_apt_read() {
	apt_user=$(eval "$(apt-config shell u APT::Sandbox::User)"; echo "${u:-_apt}")
	getent passwd "$apt_user" >/dev/null 2>&1 || return 0
	setpriv --reuid="$apt_user" --regid="$(id -g "$apt_user")" --clear-groups -- \
		test -r "$1/Packages"
}

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
chmod -R a+rX "$repo"

source_dir=$repo
if ! can_apt_read "$repo"; then
	if [ -e "$published" ] && [ ! -e "$published/$marker" ]; then
		echo "make-apt-repo: apt's _apt user cannot enter a directory above $repo, and" \
			"$published, where the repository would be published instead, exists and" \
			"was not made by this script; move it away or pass a REPO_DIR that every" \
			"user can reach (e.g. under /srv or /var/tmp)" >&2
		exit 1
	fi
	echo "make-apt-repo: apt's _apt user cannot enter a directory above $repo;" \
		"publishing a copy of the repository in $published"
	rm -rf "$published"
	mkdir -p "$published"
	cp -R "$repo"/. "$published"/
	: > "$published/$marker"
	chmod -R a+rX "$published"
	if ! can_apt_read "$published"; then
		remove_published
		echo "make-apt-repo: apt's _apt user cannot read $published either;" \
			"pass a REPO_DIR that every user can reach" >&2
		exit 1
	fi
	source_dir=$published
fi

echo "deb [trusted=yes] file:$source_dir ./" > "$list"
# Refresh only this source: quick, and independent of the network. On failure,
# take the source (and any published copy) away again rather than leave apt
# with a broken one.
if ! apt-get update -q -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
	-o APT::Get::List-Cleanup=0; then
	rm -f "$list"
	remove_published
	echo "make-apt-repo: apt-get update of $source_dir failed; $list removed" >&2
	exit 1
fi
echo "make-apt-repo: $list -> $source_dir"
grep -E '^(Package|Version|Architecture):' Packages
