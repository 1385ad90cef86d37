// Box blur of one band: the mean of the (2R+1) x (2R+1) texels around each, columns clamped at the
// image's edges. `src` is the band with RADIUS rows of its neighbors above and below (the halo),
// so output row y reads source rows y .. y + 2R.
const RADIUS: i32 = 2;

@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var dst: texture_storage_2d<rgba8unorm, write>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3u) {
  let size = vec2i(textureDimensions(dst));
  let p = vec2i(id.xy);
  if (p.x >= size.x || p.y >= size.y) { return; }
  var sum = vec4f(0.0);
  for (var dy = -RADIUS; dy <= RADIUS; dy++) {
    for (var dx = -RADIUS; dx <= RADIUS; dx++) {
      sum += textureLoad(src, vec2i(clamp(p.x + dx, 0, size.x - 1), p.y + RADIUS + dy), 0);
    }
  }
  let n = f32((2 * RADIUS + 1) * (2 * RADIUS + 1));
  textureStore(dst, p, sum / n);
}
