//! The running handshake hash: RFC 5246 §7.4.9 `Hash(handshake_messages)` for Finished
//! and RFC 7627 §3 `session_hash` for the extended master secret.
//!
//! The hash function depends on the cipher suite, which the server only names in
//! ServerHello, so the transcript buffers bytes until [`Transcript::set_hash`] and streams
//! them into a `ring::digest::Context` from then on. The buffer is bounded.
//!
//! What goes in is the handshake layer's business. RFC 6347 §4.2.6: "Hash calculations
//! include entire handshake messages, including DTLS-specific fields: message_seq,
//! fragment_offset, and fragment_length", computed "as if each handshake message had been
//! sent as a single fragment"; and "the initial ClientHello and HelloVerifyRequest MUST
//! NOT be included" (call [`Transcript::reset`] after a HelloVerifyRequest).

use std::fmt;

use ring::digest;

use super::{CryptoError, PrfHash};

/// The running handshake hash. See the module documentation.
#[derive(Clone)]
pub struct Transcript {
    state: State,
}

// Hashing is the state a transcript lives in; boxing its context would only add a heap
// hop to every update.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum State {
    /// The hash function is not known yet: bytes wait here.
    Buffering(Vec<u8>),
    /// Streaming into the suite's hash.
    Hashing { hash: PrfHash, ctx: digest::Context },
}

impl Transcript {
    /// The most bytes buffered before the hash function is chosen. A ClientHello (the
    /// only message normally hashed before ServerHello) is a few kilobytes at most;
    /// Chromium's, with an X25519MLKEM768 share, is 1413 bytes.
    pub const MAX_BUFFERED: usize = 64 * 1024;

    /// An empty transcript that buffers until [`Transcript::set_hash`].
    pub fn new() -> Self {
        Self {
            state: State::Buffering(Vec::new()),
        }
    }

    /// An empty transcript already hashing with `hash`.
    pub fn with_hash(hash: PrfHash) -> Self {
        Self {
            state: State::Hashing {
                hash,
                ctx: digest::Context::new(hash.digest()),
            },
        }
    }

    /// Appends handshake bytes. Fails only while buffering, past [`Self::MAX_BUFFERED`].
    pub fn update(&mut self, bytes: &[u8]) -> Result<(), CryptoError> {
        match &mut self.state {
            State::Buffering(buf) => {
                if buf.len() + bytes.len() > Self::MAX_BUFFERED {
                    return Err(CryptoError::TranscriptTooLong);
                }
                buf.extend_from_slice(bytes);
            }
            State::Hashing { ctx, .. } => ctx.update(bytes),
        }
        Ok(())
    }

    /// Chooses the hash function and hashes what was buffered. Choosing the same one
    /// again is a no-op; choosing another is an error.
    pub fn set_hash(&mut self, hash: PrfHash) -> Result<(), CryptoError> {
        match &self.state {
            State::Hashing { hash: current, .. } if *current == hash => Ok(()),
            State::Hashing { .. } => Err(CryptoError::TranscriptHashMismatch),
            State::Buffering(buf) => {
                let mut ctx = digest::Context::new(hash.digest());
                ctx.update(buf);
                self.state = State::Hashing { hash, ctx };
                Ok(())
            }
        }
    }

    /// The hash function, once chosen.
    pub fn hash(&self) -> Option<PrfHash> {
        match &self.state {
            State::Buffering(_) => None,
            State::Hashing { hash, .. } => Some(*hash),
        }
    }

    /// The hash of everything so far; the transcript keeps running.
    pub fn current(&self) -> Result<digest::Digest, CryptoError> {
        match &self.state {
            State::Buffering(_) => Err(CryptoError::TranscriptHashUnset),
            State::Hashing { ctx, .. } => Ok(ctx.clone().finish()),
        }
    }

    /// Forgets everything, back to buffering with no hash chosen.
    pub fn reset(&mut self) {
        self.state = State::Buffering(Vec::new());
    }
}

impl Default for Transcript {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Buffering(buf) => f
                .debug_struct("Transcript")
                .field("buffered", &buf.len())
                .finish(),
            State::Hashing { hash, .. } => {
                f.debug_struct("Transcript").field("hash", hash).finish()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffered_then_streamed_equals_one_shot() {
        for hash in [PrfHash::Sha256, PrfHash::Sha384] {
            let mut t = Transcript::new();
            t.update(b"client hello").unwrap();
            assert!(matches!(t.current(), Err(CryptoError::TranscriptHashUnset)));
            t.set_hash(hash).unwrap();
            t.update(b" server hello").unwrap();
            let mid = t.current().unwrap();
            t.update(b" more").unwrap();
            let end = t.current().unwrap();
            assert_eq!(
                mid.as_ref(),
                digest::digest(hash.digest(), b"client hello server hello").as_ref()
            );
            assert_eq!(
                end.as_ref(),
                digest::digest(hash.digest(), b"client hello server hello more").as_ref()
            );
            assert_eq!(t.set_hash(hash), Ok(()));
        }
    }

    #[test]
    fn second_hash_rejected_and_buffer_bounded() {
        let mut t = Transcript::with_hash(PrfHash::Sha256);
        assert_eq!(
            t.set_hash(PrfHash::Sha384),
            Err(CryptoError::TranscriptHashMismatch)
        );
        let mut t = Transcript::new();
        t.update(&vec![0u8; Transcript::MAX_BUFFERED]).unwrap();
        assert_eq!(t.update(b"x"), Err(CryptoError::TranscriptTooLong));
        t.reset();
        assert_eq!(t.hash(), None);
        t.update(b"x").unwrap();
    }
}
