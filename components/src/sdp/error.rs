//! Why a session description was refused: one typed error per rule or limit it can break.

/// A session description that cannot be used. Every variant is an operating error (answer
/// the signalling request with an error and go on), never a reason to panic.
///
/// `line` fields count from 1, the way an editor shows the text.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SdpError {
    /// The text is longer than [`super::MAX_SDP_LEN`] bytes.
    #[error("SDP is {len} bytes, more than the {} allowed", super::MAX_SDP_LEN)]
    TooLarge {
        /// Length of the input in bytes.
        len: usize,
    },
    /// The bytes given to [`super::SessionDescription::parse_bytes`] are not UTF-8.
    #[error("SDP is not UTF-8")]
    NotUtf8,
    /// One line is longer than [`super::MAX_LINE_LEN`] bytes.
    #[error("SDP line {line} is longer than {} bytes", super::MAX_LINE_LEN)]
    LineTooLong {
        /// The line.
        line: usize,
    },
    /// More media sections than [`super::MAX_MEDIA`].
    #[error("SDP line {line}: more than {} media sections", super::MAX_MEDIA)]
    TooManyMedia {
        /// The first `m=` line over the limit.
        line: usize,
    },
    /// One section has more `a=` lines than [`super::MAX_ATTRIBUTES`].
    #[error(
        "SDP line {line}: more than {} attributes in one section",
        super::MAX_ATTRIBUTES
    )]
    TooManyAttributes {
        /// The first `a=` line over the limit.
        line: usize,
    },
    /// One section has more non-attribute lines than [`super::MAX_FIELDS`].
    #[error(
        "SDP line {line}: more than {} non-attribute lines in one section",
        super::MAX_FIELDS
    )]
    TooManyFields {
        /// The first line over the limit.
        line: usize,
    },
    /// Not `<type>=<value>` with a one-letter type (RFC 8866 §5), an empty line, or a
    /// value holding a NUL or a stray CR (RFC 8866 §9 `byte-string`).
    #[error("SDP line {line} is not <type>=<value>")]
    Malformed {
        /// The line.
        line: usize,
    },
    /// A type letter RFC 8866 §5 does not define; the RFC lets a parser reject the whole
    /// description for it, and we do.
    #[error("SDP line {line}: unknown type letter {letter:?}")]
    UnknownLineType {
        /// The line.
        line: usize,
        /// The letter before `=`.
        letter: char,
    },
    /// A line out of the fixed order of RFC 8866 §5, repeated where only one is allowed,
    /// or of a type that the section it is in does not take.
    #[error("SDP line {line}: {letter}= is out of the order RFC 8866 section 5 fixes")]
    OutOfOrder {
        /// The line.
        line: usize,
        /// The letter before `=`.
        letter: char,
    },
    /// A line RFC 8866 §5 requires (`v=`, `o=`, `s=`, `t=`) is absent.
    #[error("SDP has no {letter}= line")]
    Missing {
        /// The letter of the missing line.
        letter: char,
    },
    /// `v=` is not `0`, the only version RFC 8866 §5.1 defines.
    #[error("SDP line {line}: unsupported version")]
    UnsupportedVersion {
        /// The line.
        line: usize,
    },
    /// An `o=`, `c=`, `b=`, `t=` or `m=` line that does not follow its RFC 8866 §9 grammar.
    #[error("SDP line {line}: malformed {letter}= line")]
    InvalidField {
        /// The line.
        line: usize,
        /// The letter of the line.
        letter: char,
    },
    /// A second media section with the `a=mid` of an earlier one: RFC 5888 §4 requires
    /// an identification-tag to be unique within a session description, and BUNDLE
    /// (RFC 8843) and JSEP (RFC 9429 §5.8) find sections by it.
    #[error(
        "SDP line {line}: a=mid:{mid} is also the mid of an earlier media section; \
         mids must be unique (RFC 5888 section 4)"
    )]
    DuplicateMid {
        /// The `a=mid` line of the later section.
        line: usize,
        /// The mid both sections carry (a `token`, bounded by the line limit).
        mid: String,
    },
    /// An attribute this model knows whose value does not follow its grammar.
    #[error("SDP line {line}: malformed a={name} attribute")]
    InvalidAttribute {
        /// The line.
        line: usize,
        /// The attribute name.
        name: &'static str,
    },
}
