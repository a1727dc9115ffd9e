//! Which bytes a JSON string holds as they are, looked at one byte or eight at a
//! time: the writer checks whole strings this way, the input reader finds where a
//! string's plain run ends.

/// The bytes a string literal holds as they are: printable ASCII but `"` and `\\`.
pub(crate) const PLAIN: [bool; 256] = {
    let mut plain = [false; 256];
    let mut b = 0x20;
    while b <= 0x7e {
        plain[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    plain
};

/// The bytes of `word` (its first byte lowest) that are not [`PLAIN`], each marked
/// by its high bit. Each test below marks the first byte of its kind exactly; a
/// borrow or carry out of a marked byte may mark bytes after it, never before, so
/// the lowest mark is the first byte that is not plain.
fn not_plain(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x80 * ONES;
    let any_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let below_space = word.wrapping_sub(0x20 * ONES) & !word & HIGH;
    // 0x7f and up: the high bit, set in the byte or by adding one.
    let del_or_above = (word.wrapping_add(ONES) | word) & HIGH;
    let quote = any_zero(word ^ (u64::from(b'"') * ONES));
    let backslash = any_zero(word ^ (u64::from(b'\\') * ONES));
    below_space | del_or_above | quote | backslash
}

/// How many of the eight bytes of `word` are [`PLAIN`] before the first that is not
/// (8 if all are).
pub(crate) fn plain_prefix(word: u64) -> usize {
    (not_plain(word).trailing_zeros() / 8) as usize
}

/// Whether every byte is [`PLAIN`]: eight at a time, then the rest one by one.
pub(crate) fn is_plain(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    words.map(|w| u64::from_le_bytes(w.try_into().expect("eight bytes"))).all(|w| not_plain(w) == 0)
        && rest.iter().all(|&b| PLAIN[usize::from(b)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_not_plain(word: [u8; 8]) -> usize {
        word.iter().position(|&b| !PLAIN[usize::from(b)]).unwrap_or(8)
    }

    #[test]
    fn a_words_plain_prefix_ends_at_its_first_byte_that_is_not_plain() {
        let filler = *b"abcdefgh";
        for at in 0..8 {
            for b in 0..=255u8 {
                let mut word = filler;
                word[at] = b;
                assert_eq!(plain_prefix(u64::from_le_bytes(word)), first_not_plain(word), "byte {b:#x} at {at}");
            }
        }
        // Words of mostly plain bytes, some not, at random: the same answer as the
        // table, byte by byte (a carry or borrow out of one byte must neither hide a
        // later one nor mark an earlier one).
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let word = seed.to_le_bytes().map(|b| if b % 16 == 0 { b } else { 0x20 + b % 0x5f });
            assert_eq!(plain_prefix(u64::from_le_bytes(word)), first_not_plain(word), "{word:x?}");
            assert_eq!(is_plain(&word), first_not_plain(word) == 8, "{word:x?}");
        }
    }
}
