//! H.264's `profile-level-id` (RFC 6184 §8.1), split into the part that names the
//! format and the level that bounds a stream, and the order of levels.
//!
//! RFC 6184 §8.2.2: `profile-level-id` and `packetization-mode` identify the format and
//! are used symmetrically "except for the level part of profile-level-id"; "the level
//! part of profile-level-id includes level_idc, and, for indication of Level 1b when
//! profile_idc is equal to 66, 77, or 88, bit 4 (constraint_set3_flag) of
//! profile-iop. The level part of profile-level-id is changeable." So two formats are
//! the same when their profiles are ([`ProfileLevelId::profile`]) and their levels
//! are compared separately ([`ProfileLevelId::level`]).

use std::fmt;

/// `profile-iop`'s constraint_set3_flag: bit 4, counting constraint_set0_flag as the
/// most significant (RFC 6184 §8.1).
const CONSTRAINT_SET3: u8 = 0x10;

/// Baseline, Main and Extended, whose Level 1b is level_idc 11 with constraint_set3_flag
/// (RFC 6184 §8.2.2).
const LEVEL_1B_BY_FLAG: [u8; 3] = [66, 77, 88];

/// The level_idc of Level 1b in the other profiles (RFC 6184 §8.2.2).
const LEVEL_IDC_1B: u8 = 9;

/// A `profile-level-id` value that is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileLevelIdError {
    /// RFC 6184 §8.1: the value is three bytes in base16, six hexadecimal digits.
    #[error("profile-level-id is not six hexadecimal digits (RFC 6184 section 8.1)")]
    NotSixHexDigits,
}

/// The three bytes of an H.264 `profile-level-id` (RFC 6184 §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProfileLevelId {
    /// `profile_idc`: 66 Baseline, 77 Main, 88 Extended, 100 High, …
    pub profile_idc: u8,
    /// `profile-iop`: constraint_set0_flag to constraint_set5_flag, then two reserved
    /// bits, most significant first.
    pub profile_iop: u8,
    /// `level_idc`: ten times the level, except Level 1b.
    pub level_idc: u8,
}

impl ProfileLevelId {
    /// What a format without `profile-level-id` is (RFC 6184 §8.1: "the Baseline
    /// profile, without additional constraints at Level 1, MUST be inferred").
    pub const DEFAULT: Self = Self {
        profile_idc: 0x42,
        profile_iop: 0x00,
        level_idc: 0x0a,
    };

    /// Reads the six hexadecimal digits of the parameter's value.
    pub fn parse(text: &str) -> Result<Self, ProfileLevelIdError> {
        let digits = text.trim();
        if digits.len() != 6 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ProfileLevelIdError::NotSixHexDigits);
        }
        let byte = |i: usize| {
            digits
                .get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or(ProfileLevelIdError::NotSixHexDigits)
        };
        Ok(Self {
            profile_idc: byte(0)?,
            profile_iop: byte(2)?,
            level_idc: byte(4)?,
        })
    }

    /// The profile part: `profile_idc` and `profile-iop` without the bit that belongs
    /// to the level (constraint_set3_flag in Baseline, Main and Extended, RFC 6184
    /// §8.2.2). Equal profiles are one format whatever the levels.
    pub fn profile(self) -> [u8; 2] {
        let iop = if LEVEL_1B_BY_FLAG.contains(&self.profile_idc) {
            self.profile_iop & !CONSTRAINT_SET3
        } else {
            self.profile_iop
        };
        [self.profile_idc, iop]
    }

    /// The level part (RFC 6184 §8.2.2).
    pub fn level(self) -> H264Level {
        let level_1b = if LEVEL_1B_BY_FLAG.contains(&self.profile_idc) {
            self.level_idc == 11 && self.profile_iop & CONSTRAINT_SET3 != 0
        } else {
            self.level_idc == LEVEL_IDC_1B
        };
        if level_1b {
            H264Level::LEVEL_1B
        } else {
            H264Level(u16::from(self.level_idc) * 2)
        }
    }
}

/// An H.264 level, ordered as decoders take them: RFC 6184 §8.2.2 "all the levels
/// except for Level 1b are equal to the value of level_idc divided by 10. Level 1b is a
/// level higher than Level 1.0 but lower than Level 1.1".
///
/// Held as twice level_idc, with 1b at 21, between Level 1 (20) and Level 1.1 (22).
/// level_idc values H.264 does not define keep their numeric order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct H264Level(u16);

impl H264Level {
    /// Level 1b.
    pub const LEVEL_1B: Self = Self(21);

    /// The level of `level_idc`, in a profile where it is not Level 1b.
    pub fn from_level_idc(level_idc: u8) -> Self {
        Self(u16::from(level_idc) * 2)
    }
}

impl fmt::Display for H264Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::LEVEL_1B {
            return f.write_str("1b");
        }
        let idc = self.0 / 2;
        write!(f, "{}.{}", idc / 10, idc % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(id: &str) -> H264Level {
        ProfileLevelId::parse(id).unwrap().level()
    }

    #[test]
    fn the_three_bytes_of_chromiums_formats() {
        let cb31 = ProfileLevelId::parse("42e01f").unwrap();
        assert_eq!(
            (cb31.profile_idc, cb31.profile_iop, cb31.level_idc),
            (66, 0xe0, 31)
        );
        assert_eq!(cb31.level().to_string(), "3.1");
        assert_eq!(level("640c1f").to_string(), "3.1");
        assert_eq!(level("4d001f"), level("42e01f"));
        assert_eq!(level("640c28").to_string(), "4.0");
        assert_eq!(
            level("42E01F"),
            level("42e01f"),
            "hex digits in either case"
        );
        assert_eq!(ProfileLevelId::DEFAULT.level().to_string(), "1.0");
    }

    #[test]
    fn level_1b_sits_between_1_and_1_1() {
        // Baseline, Main and Extended: level_idc 11 with constraint_set3_flag.
        for p in ["42", "4d", "58"] {
            let one = level(&format!("{p}e00a"));
            let one_b = level(&format!("{p}f00b"));
            let one_one = level(&format!("{p}e00b"));
            assert_eq!(one_b, H264Level::LEVEL_1B, "{p}");
            assert!(
                one < one_b && one_b < one_one,
                "{p}: {one} {one_b} {one_one}"
            );
        }
        // Other profiles: level_idc 9; constraint_set3_flag with 11 is 1.1 there.
        assert_eq!(level("640009"), H264Level::LEVEL_1B);
        assert_eq!(level("64100b").to_string(), "1.1");
        assert!(level("64000a") < level("640009") && level("640009") < level("64000b"));
        assert_eq!(H264Level::LEVEL_1B.to_string(), "1b");
        // constraint_set3_flag is no 1b at another level of Baseline.
        assert_eq!(level("42f01f"), level("42e01f"));
    }

    #[test]
    fn constraint_set3_is_level_not_profile_in_baseline_main_extended() {
        let p = |id: &str| ProfileLevelId::parse(id).unwrap().profile();
        assert_eq!(p("42f00b"), p("42e01f"), "1b Constrained Baseline");
        assert_eq!(p("4d100b"), p("4d001f"));
        assert_ne!(
            p("42e01f"),
            p("42001f"),
            "Constrained Baseline is not Baseline"
        );
        assert_ne!(
            p("64101f"),
            p("64001f"),
            "the flag is the profile's in High"
        );
        assert_ne!(p("640c1f"), p("42e01f"));
    }

    #[test]
    fn malformed_values_are_errors() {
        for bad in [
            "", "42e01", "42e01f0", "42e0g1", "+42e01", "42 e01", "4２e01f", "0x42e0", "42e01f;",
        ] {
            assert_eq!(
                ProfileLevelId::parse(bad),
                Err(ProfileLevelIdError::NotSixHexDigits),
                "{bad:?}"
            );
        }
        assert!(
            ProfileLevelId::parse(" 42e01f ").is_ok(),
            "whitespace around"
        );
    }
}
