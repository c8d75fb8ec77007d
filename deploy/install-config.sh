#!/bin/sh
# meson install step: put the example config and hugepage settings in place, never over an operator's own files.
set -eu
dest="${DESTDIR:-}$1"
src="$2"
mkdir -p "$dest"
for f in sluice.yaml hugepages.conf; do
  if [ -e "$dest/$f" ]; then
    echo "sluice: keeping existing $dest/$f"
  else
    install -m 0644 "$src/$f" "$dest/$f"
    echo "sluice: installed $dest/$f"
  fi
done
