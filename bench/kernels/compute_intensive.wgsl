// compute_intensive.wgsl: an ALU-bound kernel whose cost is proportional to `iterations`.
//
// Bindings (all @group(0)):
//   @binding(0) input: array<f32>, storage, read
//   @binding(1) out:   array<f32>, storage, read_write   (n = arrayLength(&out))
//
// Overrides:
//   iterations: u32 = 64   (steps per element; 0 gives out[i] = input[i])
//
// Entry point `main`, @workgroup_size(256).
// Dispatch: wg = ceil(n / 256); dispatchWorkgroups(min(wg, 65535), ceil(wg / 65535)).
// Global index i = gid.x + gid.y * (num_workgroups.x * 256); invocations with i >= n do nothing.
//
// Per element, with y = input[i] (meant for y in [-1, 1]) and x = y to start, for k = 0 ..
// iterations - 1:
//   t = f32(k & 1023) * 2^-14                       (exact: a small step-dependent nudge)
//   x = ((0.5 * y + 0.5 * x) + t) - 0.125 * ((x * x) * x)
// Only + and * (no sin, no division), in this exact association order. The map
// g(x) = 0.5y + 0.5x - 0.125x^3 + t has |g'(x)| <= 0.5 on [-1, 1] and maps [-1, 1] into
// [-0.875, 0.94], so it is a contraction: rounding differences (a GPU may fuse a*b+c into one
// FMA, or reassociate) are halved at every step instead of growing with `iterations`. Without t
// the loop would settle on the root of x + 0.25x^3 = y after ~25 steps; t keeps the result a
// function of the last steps' k, so a run with the wrong iteration count fails the check.
//
// CPU reference (bench/reference.ts, computeIntensiveRef): the same steps with Math.fround after
// every operation. Tolerance: |got - want| <= max(1e-5, 1e-4 * |want|) (COMPUTE_INTENSIVE_TOL);
// on SwiftShader the results are bit-identical.

override iterations: u32 = 64u;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * (nwg.x * 256u);
  let n = arrayLength(&out);
  if (i >= n) {
    return;
  }
  let y = input[i];
  let hy = 0.5 * y;
  var x = y;
  for (var k = 0u; k < iterations; k++) {
    let t = f32(k & 1023u) * 0.00006103515625; // 2^-14
    x = ((hy + 0.5 * x) + t) - 0.125 * ((x * x) * x);
  }
  out[i] = x;
}
