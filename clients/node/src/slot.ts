// Redis Cluster's key slot (CRC16-XMODEM of the key, or of its {hash tag}, mod 16384):
// module commands are unknown to the cluster clients' own routing, so this package
// routes every LOCK.* command by its key itself.

const TABLE = new Uint16Array(256);
for (let byte = 0; byte < 256; byte++) {
  let crc = byte << 8;
  for (let bit = 0; bit < 8; bit++) {
    crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  TABLE[byte] = crc;
}

function crc16(data: Uint8Array): number {
  let crc = 0;
  for (const byte of data) {
    crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ byte) & 0xff] ?? 0);
  }
  return crc;
}

/** The part of `key` that decides its slot: the first non-empty `{...}`, else all. */
function hashed(key: Buffer): Buffer {
  const open = key.indexOf(0x7b); // {
  if (open < 0) return key;
  const close = key.indexOf(0x7d, open + 1); // }
  if (close < 0 || close === open + 1) return key;
  return key.subarray(open + 1, close);
}

export function keySlot(key: string | Buffer): number {
  const bytes = typeof key === "string" ? Buffer.from(key) : key;
  return crc16(hashed(bytes)) % 16384;
}
