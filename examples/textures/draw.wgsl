// Draws a texture onto the canvas: one triangle that covers the screen, sampled at texel centers.
@group(0) @binding(0) var image: texture_2d<f32>;
@group(0) @binding(1) var nearest: sampler;

struct Varyings {
  @builtin(position) position: vec4f,
  @location(0) uv: vec2f,
};

@vertex
fn vs(@builtin(vertex_index) i: u32) -> Varyings {
  let xy = vec2f(f32((i << 1u) & 2u), f32(i & 2u));   // (0, 0), (2, 0), (0, 2)
  var out: Varyings;
  out.position = vec4f(xy * 2.0 - 1.0, 0.0, 1.0);
  out.uv = vec2f(xy.x, 1.0 - xy.y);                     // texture rows run top to bottom
  return out;
}

@fragment
fn fs(in: Varyings) -> @location(0) vec4f {
  return textureSample(image, nearest, in.uv);
}
