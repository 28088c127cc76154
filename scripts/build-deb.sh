#!/usr/bin/env bash
# `make deb` and `make dist`: the relay as a Debian package and as a tarball of the same tree, for hosts without a
# Swift toolchain (SPEC §6a).
#
#   scripts/build-deb.sh deb    dist/kumapush-relay_<version>_<arch>.deb, checked by lintian
#   scripts/build-deb.sh dist   dist/kumapush-relay-<version>-linux-<arch>.tar.gz
#
# The binary links the Swift runtime and Foundation statically (--static-swift-stdlib); the C libraries stay
# Debian's shared ones, and the package depends on them as dpkg-shlibdeps reads them from the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-deb}
case "$kind" in deb | dist) ;; *) echo "usage: $0 deb|dist" >&2; exit 2 ;; esac

swift build -c release --static-swift-stdlib --product kumapush-relay
binary=$(swift build -c release --show-bin-path)/kumapush-relay

# 0.1.0-dev is not a Debian version: `~` sorts a pre-release before its release, and `-1` is the package revision.
upstream=$("$binary" version | awk 'NR == 1 { print $2 }')
version="${upstream//-/\~}-1"
arch=$(dpkg --print-architecture)
# Every date in the package is the last commit's, so two builds of one commit give the same files.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

work=.build/package
root=$work/kumapush-relay_${version}_${arch}
rm -rf "$work"
mkdir -p "$root" dist

# The tree: the binary (symbols stripped, as Debian ships binaries), the units, the settings, the docs.
install -D -m 0755 "$binary" "$root/usr/bin/kumapush-relay"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/kumapush-relay"
# Every unit in deploy/systemd (services, sockets, templates), pointed at the packaged binary.
for unit in deploy/systemd/*.service deploy/systemd/*.socket; do
  [ -e "$unit" ] || continue
  install -D -m 0644 "$unit" "$root/lib/systemd/system/$(basename "$unit")"
  sed -i 's|/usr/local/bin/kumapush-relay|/usr/bin/kumapush-relay|g' "$root/lib/systemd/system/$(basename "$unit")"
done
# 0600: the units read it as root before dropping to kumapush, and it may hold DATABASE_URL's password.
install -D -m 0600 deploy/kumapush.env.example "$root/etc/kumapush/kumapush.env"
docs=$root/usr/share/doc/kumapush-relay
install -D -m 0644 packaging/debian/copyright "$docs/copyright"
install -m 0644 README.md docs/operations.md docs/outage-runbook.md "$docs/"
gzip -9n -c CHANGELOG.md >"$docs/changelog.gz"
date_rfc2822=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
cat >"$work/changelog.Debian" <<EOF
kumapush-relay ($version) unstable; urgency=medium

  * Built from the project's source; the changes are in changelog.gz.

 -- KumaPush Relay maintainers <maintainers@users.noreply.a-seed-148e1ac7.example>  $date_rfc2822
EOF
gzip -9n -c "$work/changelog.Debian" >"$docs/changelog.Debian.gz"
install -d "$root/usr/share/man/man1"
gzip -9n -c packaging/debian/kumapush-relay.1 >"$root/usr/share/man/man1/kumapush-relay.1.gz"
install -D -m 0644 packaging/debian/lintian-overrides "$root/usr/share/lintian/overrides/kumapush-relay"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

if [ "$kind" = dist ]; then
  tarball=dist/kumapush-relay-$upstream-linux-$arch.tar.gz
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$root" -cf - \
    usr lib etc | gzip -9n >"$tarball"
  echo "==> $tarball ($(du -h "$tarball" | cut -f1))"
  exit 0
fi

# Depends: the shared libraries the binary loads, as Debian's shlibs files name their packages, and adduser for
# the maintainer scripts. dpkg-shlibdeps wants a source package around it: a throwaway debian/control.
mkdir -p "$work/shlibs/debian"
printf 'Source: kumapush-relay\n\nPackage: kumapush-relay\nArchitecture: any\n' >"$work/shlibs/debian/control"
shlibs=$(cd "$work/shlibs" && dpkg-shlibdeps -O -e "$OLDPWD/$root/usr/bin/kumapush-relay" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "dpkg-shlibdeps found no shared libraries in the binary" >&2; exit 1; }
depends="adduser, $shlibs"

install -d -m 0755 "$root/DEBIAN"
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@DEPENDS@|$depends|" \
  -e "s|@INSTALLED_SIZE@|$(du -sk --apparent-size "$root" | cut -f1)|" packaging/debian/control.in >"$root/DEBIAN/control"
echo /etc/kumapush/kumapush.env >"$root/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
(cd "$root" && find usr lib -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

deb=dist/kumapush-relay_${version}_${arch}.deb
# xz, Debian's default: 15 MB against gzip's 23, for five times the CPU. DEB_COMPRESSION=gzip makes the same
# contents faster (the package test uses it: compression changes no installed file).
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$root" "$deb" >/dev/null
echo "==> $deb ($(du -h "$deb" | cut -f1)); lintian:"
lintian --fail-on error,warning --info "$deb"
