// Tone map: Reinhard per color channel with an exposure, normalized so that white stays white
// (v * (1 + e) / (1 + e * v)); alpha 1.
override exposure: f32 = 2.0;

@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var dst: texture_storage_2d<rgba8unorm, write>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3u) {
  if (any(id.xy >= textureDimensions(dst))) { return; }
  let v = textureLoad(src, id.xy, 0).rgb;
  textureStore(dst, id.xy, vec4f(v * (1.0 + exposure) / (1.0 + exposure * v), 1.0));
}
