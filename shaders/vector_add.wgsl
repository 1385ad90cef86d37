// vector_add.wgsl: out[i] = a[i] + b[i]
//
// Bindings (all @group(0)):
//   @binding(0) a:   array<f32>, storage, read
//   @binding(1) b:   array<f32>, storage, read
//   @binding(2) out: array<f32>, storage, read_write
// n = arrayLength(&out); a and b must hold at least n elements.
//
// Entry point `main`, @workgroup_size(256), no overrides.
//
// Dispatch: wg = ceil(n / 256); dispatchWorkgroups(min(wg, 65535), ceil(wg / 65535)).
// Global index i = gid.x + gid.y * (num_workgroups.x * 256), so a 2D grid covers n beyond
// 65535 * 256; invocations with i >= n do nothing.
//
// CPU reference (bench/reference.ts, vectorAddRef): out[i] = Math.fround(a[i] + b[i]),
// bit-exact (one IEEE f32 add, round to nearest even).

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * (nwg.x * 256u);
  let n = arrayLength(&out);
  if (i >= n) {
    return;
  }
  out[i] = a[i] + b[i];
}
