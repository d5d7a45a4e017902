// NRRD, the format the server answers label maps in and the one the viewer submits them in: a text header,
// a blank line, then the voxels (raw or gzip; x fastest, as Cornerstone's scalar data is laid out).

const TYPES = {
  'uchar': Uint8Array, 'unsigned char': Uint8Array, 'uint8': Uint8Array, 'uint8_t': Uint8Array,
  'signed char': Int8Array, 'int8': Int8Array, 'int8_t': Int8Array, 'char': Int8Array,
  'short': Int16Array, 'int16': Int16Array, 'int16_t': Int16Array, 'signed short': Int16Array,
  'ushort': Uint16Array, 'unsigned short': Uint16Array, 'uint16': Uint16Array, 'uint16_t': Uint16Array,
  'int': Int32Array, 'int32': Int32Array, 'int32_t': Int32Array, 'signed int': Int32Array,
  'uint': Uint32Array, 'unsigned int': Uint32Array, 'uint32': Uint32Array, 'uint32_t': Uint32Array,
  'float': Float32Array, 'double': Float64Array,
};

function headerEnd(bytes) {
  for (let i = 0; i + 1 < bytes.length && i < 65536; i++) {
    if (bytes[i] === 10 && bytes[i + 1] === 10) return i + 2;
    if (bytes[i] === 10 && bytes[i + 1] === 13 && bytes[i + 2] === 10) return i + 3;
  }
  throw new Error('not an NRRD file: no end of header');
}

const vec = (s) => (s.trim() === 'none' ? null : s.match(/\(([^)]*)\)/g)?.map((v) => v.slice(1, -1).split(',').map(Number)));

/** {sizes, data, spacing, origin, fields} of an NRRD file's ArrayBuffer; an Error naming what is wrong. */
export async function readNrrd(buffer) {
  const bytes = new Uint8Array(buffer);
  if (new TextDecoder().decode(bytes.subarray(0, 4)) !== 'NRRD') throw new Error('not an NRRD file');
  const end = headerEnd(bytes);
  const fields = {};
  for (const line of new TextDecoder().decode(bytes.subarray(0, end)).split(/\r?\n/).slice(1)) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([^:]+):=?\s?(.*)$/);
    if (m) fields[m[1].trim().toLowerCase()] = m[2].trim();
  }
  if (fields['data file'] || fields['datafile']) throw new Error('a detached NRRD header is not read here');
  const Type = TYPES[fields.type];
  if (!Type) throw new Error(`NRRD type ${fields.type} is not supported`);
  const sizes = fields.sizes.split(/\s+/).map(Number);
  const count = sizes.reduce((a, b) => a * b, 1);
  let payload = bytes.subarray(end);
  const encoding = fields.encoding || 'raw';
  if (encoding === 'gzip' || encoding === 'gz') {
    const stream = new Blob([payload]).stream().pipeThrough(new DecompressionStream('gzip'));
    payload = new Uint8Array(await new Response(stream).arrayBuffer());
  } else if (encoding !== 'raw') {
    throw new Error(`NRRD encoding ${encoding} is not supported`);
  }
  const need = count * Type.BYTES_PER_ELEMENT;
  if (payload.length < need) throw new Error(`NRRD data is short: ${payload.length} of ${need} bytes`);
  const big = (fields.endian || 'little') === 'big' && Type.BYTES_PER_ELEMENT > 1;
  const copy = payload.slice(0, need);
  if (big) {
    const n = Type.BYTES_PER_ELEMENT;
    for (let i = 0; i < copy.length; i += n) copy.subarray(i, i + n).reverse();
  }
  const data = new Type(copy.buffer);
  const dirs = fields['space directions'] ? vec(fields['space directions']) : null;
  const spacing = dirs ? dirs.filter(Boolean).map((d) => Math.hypot(...d)) : (fields.spacings || '').split(/\s+/).map(Number).filter((v) => v > 0);
  const origin = fields['space origin'] ? vec(fields['space origin'])?.[0] : null;
  return { sizes, data, spacing, origin, fields };
}

/** A raw uint8 NRRD of a label map: sizes [W, H] (one frame) or [W, H, N] (a clip), no space (the server puts
 *  it on the image's own grid by its shape). */
export function writeNrrd(u8, sizes) {
  const header = `NRRD0004\ntype: uint8\ndimension: ${sizes.length}\nsizes: ${sizes.join(' ')}\nencoding: raw\n\n`;
  const head = new TextEncoder().encode(header);
  const out = new Uint8Array(head.length + u8.length);
  out.set(head, 0);
  out.set(u8, head.length);
  return out;
}
