//! Byte-level tokenization: token = byte value, vocabulary 256.
//!
//! No merges, no special tokens: every file is representable, decoding is exact, and the model's
//! vocabulary does not depend on the corpus. Multi-byte UTF-8 characters become several tokens.

/// Number of distinct tokens: one per byte value.
pub const VOCAB_SIZE: usize = 256;

/// Tokens of `bytes`, one `u32` per byte (candle's integer index type).
pub fn encode(bytes: &[u8]) -> Vec<u32> {
    bytes.iter().map(|&b| u32::from(b)).collect()
}

/// Bytes of `tokens`, or `None` if a token is not below [`VOCAB_SIZE`].
pub fn decode(tokens: &[u32]) -> Option<Vec<u8>> {
    tokens.iter().map(|&t| u8::try_from(t).ok()).collect()
}

/// Text of `tokens`; invalid UTF-8 (e.g. a window cut inside a character) is shown as U+FFFD.
pub fn decode_lossy(tokens: &[u32]) -> Option<String> {
    decode(tokens).map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all_bytes() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        let tokens = encode(&bytes);
        assert_eq!(tokens.len(), VOCAB_SIZE);
        assert_eq!(tokens[200], 200);
        assert_eq!(decode(&tokens).unwrap(), bytes);
    }

    #[test]
    fn out_of_vocab_token_is_rejected() {
        assert_eq!(decode(&[65, 256]), None);
        assert_eq!(decode_lossy(&[72, 105]).as_deref(), Some("Hi"));
    }
}
