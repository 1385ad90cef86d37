#!/bin/sh
# Builds the Vulkan device-select layer (docs/MULTI_GPU.md) into tools/vk-devsel/out/: the layer's
# .so beside its manifest, and vkenum, a lister of the Vulkan devices. Needs gcc; Vulkan's headers
# come from /usr/include or, where they are missing, Debian's libvulkan-dev (downloaded, not installed).
set -e
here=$(cd "$(dirname "$0")" && pwd)
out="$here/out"
mkdir -p "$out"
inc=/usr/include
if [ ! -f "$inc/vulkan/vk_layer.h" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libvulkan-dev >/dev/null && dpkg-deb -x libvulkan-dev_*.deb x)
  inc="$tmp/x/usr/include"
fi
cc() { gcc -O2 -Wall -Wextra -Wno-unused-parameter -I"$inc" "$@"; }
cc -fPIC -shared -fvisibility=hidden -o "$out/libVkLayer_devsel.so" "$here/devsel_layer.c" -lpthread -Wl,--as-needed -Wl,-z,defs
cc -o "$out/vkenum" "$here/vkenum.c" -ldl
strip --strip-unneeded "$out/libVkLayer_devsel.so" "$out/vkenum"
cp "$here/VkLayer_devsel.json" "$out/"
echo "built $out: VK_ADD_LAYER_PATH=$out VK_INSTANCE_LAYERS=VK_LAYER_DEVSEL_pick"
