#!/bin/bash
# Same interface as Mellanox nv_peer_memory's build_module.sh (nodeforge fixture): source packages from this tree,
# /tmp/nvidia-peer-memory_VERSION.orig.tar.gz on Debian, a source rpm elsewhere. The nodeforge role does not use it:
# it builds the module itself and packages it per kernel.
set -e
VERSION=$(grep Version: *.spec | cut -d : -f 2 | sed -e 's@\s@@g')
RELEASE=$(grep "define _release" *.spec | cut -d" " -f"4" | sed -r -e 's/}//')
tmpdir=$(mktemp -d /tmp/nv.XXXXXX)
cp -r . "$tmpdir/nvidia_peer_memory-$VERSION"
if [ -f /etc/debian_version ]; then
	mv "$tmpdir/nvidia_peer_memory-$VERSION" "$tmpdir/nvidia-peer-memory-$VERSION"
	tar -C "$tmpdir" -czf "/tmp/nvidia-peer-memory_$VERSION.orig.tar.gz" "nvidia-peer-memory-$VERSION"
	echo "Built: /tmp/nvidia-peer-memory_$VERSION.orig.tar.gz"
else
	mkdir -p "$tmpdir/topdir/SRPMS"
	tar -C "$tmpdir" -czf "$tmpdir/nvidia_peer_memory-$VERSION.tar.gz" "nvidia_peer_memory-$VERSION"
	rpmbuild -ts --define "_topdir $tmpdir/topdir" "$tmpdir/nvidia_peer_memory-$VERSION.tar.gz"
	mv "$tmpdir"/topdir/SRPMS/*.src.rpm /tmp
	echo "Built: /tmp/nvidia_peer_memory-$VERSION-$RELEASE.src.rpm"
fi
rm -rf "$tmpdir"
