//! Redis Cluster's hash slot of a key: CRC16 (XMODEM) of the key, or of its hash tag
//! (the part between the first `{` and the next `}`, when not empty), modulo 16384.
//! Hand-written: twenty lines, and the slot rule is Redis's own, not a generic CRC's.

/// Redis Cluster's number of hash slots.
const SLOTS: u16 = 16384;

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// The part of `key` that decides its slot.
fn hashed_part(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = key.get(open + 1..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => rest.get(..close).unwrap_or(key),
        _ => key,
    }
}

/// The hash slot of `key`.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_redis_cluster() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"bar"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b""), 0);
    }
}
