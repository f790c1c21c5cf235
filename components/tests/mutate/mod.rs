//! The byte-level mutations every parser fuzz test starts from; each test adds the
//! field attacks of its own protocol.

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;

/// A number below `n` (0 when `n` is 0).
pub fn pick(rng: &mut ChaCha8Rng, n: usize) -> usize {
    (rng.next_u32() as usize) % n.max(1)
}

/// Mutation `op` of `d`: 0 pure noise of up to `noise_max` bytes, 1 up to 8 bit flips,
/// 2 up to 4 bytes set to one of `boundary`, 3 a cut, 4 up to 64 random bytes
/// inserted; any other `op` rotates the bytes.
pub fn generic(
    rng: &mut ChaCha8Rng,
    mut d: Vec<u8>,
    op: u32,
    noise_max: usize,
    boundary: &[u8],
) -> Vec<u8> {
    match op {
        0 => {
            let n = pick(rng, noise_max);
            (0..n).map(|_| rng.next_u32() as u8).collect()
        }
        1 => {
            for _ in 0..1 + pick(rng, 8) {
                let i = pick(rng, d.len());
                if let Some(b) = d.get_mut(i) {
                    *b ^= 1 << (rng.next_u32() % 8);
                }
            }
            d
        }
        2 => {
            for _ in 0..1 + pick(rng, 4) {
                let i = pick(rng, d.len());
                if let Some(b) = d.get_mut(i) {
                    *b = boundary[pick(rng, boundary.len())];
                }
            }
            d
        }
        3 => {
            d.truncate(pick(rng, d.len() + 1));
            d
        }
        4 => {
            let at = pick(rng, d.len() + 1);
            let n = 1 + pick(rng, 64);
            let junk: Vec<u8> = (0..n).map(|_| rng.next_u32() as u8).collect();
            d.splice(at..at, junk);
            d
        }
        _ => {
            let len = d.len();
            d.rotate_left(pick(rng, len + 1).min(len));
            d
        }
    }
}
