//! Decimal digits of an i64 into a stack buffer: numbers go to Redis as text in every
//! replicated effect, and formatting them here is cheaper than Redis's conversion.

/// Room for any i64 in decimal, sign included.
pub const DIGITS: usize = 20;

/// Writes `n` in decimal into `buffer` and returns the digits: numbers go to Redis as
/// text, and formatting them here is cheaper than Redis's long-long conversion.
pub fn digits(n: i64, buffer: &mut [u8; DIGITS]) -> &[u8] {
    let mut magnitude = n.unsigned_abs();
    let mut len = 0;
    for slot in buffer.iter_mut().rev() {
        *slot = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        len += 1;
        if magnitude == 0 {
            break;
        }
    }
    if n < 0 {
        if let Some(slot) = buffer.iter_mut().rev().nth(len) {
            *slot = b'-';
            len += 1;
        }
    }
    buffer.get(DIGITS - len..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{digits, DIGITS};

    #[test]
    fn formats_like_display() {
        for n in [0, 7, -7, 10, 1_795_993_847_121_342, i64::MAX, i64::MIN] {
            let mut buffer = [0u8; DIGITS];
            assert_eq!(digits(n, &mut buffer), n.to_string().as_bytes());
        }
    }
}
