// sleep.wgsl: a busy-wait kernel whose GPU time is proportional to `iterations`.
//
// WGSL has no clock, so "sleeping" is a dependent integer chain per element: every step needs
// the previous one, and the xorshift makes the step non-affine, so no compiler can fold the loop
// into a closed form (a pure LCG could be collapsed into one multiply-add per power of two).
// Callers calibrate `iterations` against timestamp queries to reach a target duration.
//
// Bindings (all @group(0)):
//   @binding(0) data: array<u32>, storage, read_write   (n = arrayLength(&data))
//
// Overrides:
//   iterations: u32 = 1024   (steps per element; 0 leaves data unchanged)
//
// Entry point `main`, @workgroup_size(64).
// Dispatch: wg = ceil(n / 64); dispatchWorkgroups(min(wg, 65535), ceil(wg / 65535)).
// Global index i = gid.x + gid.y * (num_workgroups.x * 64); invocations with i >= n do nothing.
//
// Per element, all arithmetic u32 and wrapping mod 2^32:
//   x = data[i]
//   repeat iterations times: x = x * 1664525 + 1013904223; x = x ^ (x >> 13)
//   data[i] = x
// CPU reference (bench/reference.ts, sleepRef): the same with Math.imul and >>> 0, bit-exact.

override iterations: u32 = 1024u;

@group(0) @binding(0) var<storage, read_write> data: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * (nwg.x * 64u);
  let n = arrayLength(&data);
  if (i >= n) {
    return;
  }
  var x = data[i];
  for (var k = 0u; k < iterations; k++) {
    x = x * 1664525u + 1013904223u;
    x = x ^ (x >> 13u);
  }
  data[i] = x;
}
