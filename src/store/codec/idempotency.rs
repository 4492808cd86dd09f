//! The values of the `idempotency` tree: a record's head, and the response it and its chunks
//! hold.
//!
//! A record is one request's `Idempotency-Key`, the fingerprint of that request and the
//! response it was answered, stored in the transaction of its write
//! (`store::commit::idempotency`). The response is encoded whole ([`encode_response`]) and
//! cut into chunks of at most [`RESPONSE_CHUNK_BYTES`]. A head of format 2 carries the first
//! chunk itself, and each further chunk has a key of its own (a head of format 1 carries
//! none: every chunk has its key). So a record whose response fits one chunk — every answer
//! but an add's 202 that lists many merged items — is one key, and no value of the tree is
//! larger than a head with a full chunk, however large the body: the bound `store::blobs`
//! needs.

use serde::{Deserialize, Serialize};

use super::{config, decode_body, encode_framed, CodecError, VARINT};

/// Format byte of a head of format 1: [`HeadV1`] alone; the response's chunks each under a
/// key of their own (schema 7 and 8).
pub const HEAD_V1: u8 = 1;

/// Format byte of a head of format 2 (schema 9): [`HeadV1`]'s fields, then the response's
/// first `min(len, RESPONSE_CHUNK_BYTES)` bytes as they are (their length follows from
/// `len`: no prefix); the chunks after the first each under a key of their own.
pub const HEAD_V2: u8 = 2;

/// Format byte of [`ResponseV1`]: the first byte of a record's response bytes (the first
/// chunk's first byte).
pub const RESPONSE_V1: u8 = 1;

/// The most bytes of a record's encoded response one chunk holds.
pub const RESPONSE_CHUNK_BYTES: usize = 8 * 1024;

/// The largest head without its inline chunk: the format byte, the commit time, the 32
/// fingerprint bytes (a fixed array: no length), the response's length.
pub const MAX_HEAD_BYTES: usize = 1 + VARINT + 32 + VARINT;

/// The largest value of the `idempotency` tree: a head with a full chunk inline (a chunk
/// of its own is smaller; the time index's values are empty).
pub const MAX_VALUE_BYTES: usize = MAX_HEAD_BYTES + RESPONSE_CHUNK_BYTES;

/// A record's head fields, the whole head of format 1 and the start of format 2. Frozen like
/// every value struct (`super`): field order and types are the on-disk layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadV1 {
    /// When the write committed (unix ms): the record lives for the retention from then.
    pub at: i64,
    /// SHA-256 of the request (method, path, query, `Blocklist-Source` and `If-Match`,
    /// body) the key was first used with.
    pub fingerprint: [u8; 32],
    /// The length of the encoded response: its chunks are `len / RESPONSE_CHUNK_BYTES`,
    /// rounded up.
    pub len: u64,
}

/// A head as read, of either format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub at: i64,
    pub fingerprint: [u8; 32],
    pub len: u64,
    /// Format 2: the response's first chunk, carried by the head. Format 1: `None`.
    pub inline: Option<Vec<u8>>,
}

impl Head {
    /// How many chunks the response has, the one inline included.
    pub fn chunks(&self) -> u64 {
        self.len.div_ceil(RESPONSE_CHUNK_BYTES as u64)
    }

    /// The numbers of the chunks stored under keys of their own: all of them in format 1,
    /// all but the first in format 2.
    pub fn stored_chunks(&self) -> std::ops::Range<u64> {
        let first = u64::from(self.inline.is_some());
        first.min(self.chunks())..self.chunks()
    }
}

/// A kept response, format 1. Frozen like [`HeadV1`].
#[derive(Serialize, Deserialize)]
struct ResponseV1 {
    status: u16,
    /// Name (lower case) and value of each header kept, in the order sent.
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// A response as the HTTP layer rendered it: status, the headers it chose, the body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptResponse {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// A head of format 2 for `fields`, whose response's bytes are `response`: the fields, then
/// the response's first chunk. The rest of `response` is for [`later_chunks`].
pub fn encode_head(fields: &HeadV1, response: &[u8]) -> Vec<u8> {
    debug_assert_eq!(fields.len, response.len() as u64);
    let mut out = encode_framed(HEAD_V2, fields);
    out.extend_from_slice(&response[..response.len().min(RESPONSE_CHUNK_BYTES)]);
    out
}

/// The chunks of `response` a head of format 2 does not carry, numbered from 1.
pub fn later_chunks(response: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    response
        .chunks(RESPONSE_CHUNK_BYTES)
        .enumerate()
        .skip(1)
        .map(|(n, chunk)| {
            (
                u32::try_from(n).expect("a response of less than 32 TiB"),
                chunk,
            )
        })
}

/// A head of format 1 (readable; only tests write one).
pub fn encode_head_v1(fields: &HeadV1) -> Vec<u8> {
    encode_framed(HEAD_V1, fields)
}

pub fn decode_head(bytes: &[u8]) -> Result<Head, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    let (fields, inline) = match format {
        HEAD_V1 => (decode_body::<HeadV1>(body)?, None),
        HEAD_V2 => {
            let (fields, read): (HeadV1, usize) = bincode::serde::decode_from_slice(
                body,
                config().with_limit::<{ MAX_HEAD_BYTES }>(),
            )
            .map_err(|e| CodecError::Decode(e.to_string()))?;
            let inline = &body[read..];
            let want = fields.len.min(RESPONSE_CHUNK_BYTES as u64);
            if inline.len() as u64 != want {
                return Err(CodecError::Decode(format!(
                    "the head carries {} of its first {want} response bytes",
                    inline.len()
                )));
            }
            (fields, Some(inline.to_vec()))
        }
        other => return Err(CodecError::UnknownFormat(other)),
    };
    Ok(Head {
        at: fields.at,
        fingerprint: fields.fingerprint,
        len: fields.len,
        inline,
    })
}

/// The response's bytes, to be cut into chunks: the format byte, then bincode.
pub fn encode_response(response: &KeptResponse) -> Vec<u8> {
    encode_framed(
        RESPONSE_V1,
        &ResponseV1 {
            status: response.status,
            headers: response.headers.clone(),
            body: response.body.clone(),
        },
    )
}

/// Decodes the response from its chunks' bytes, put back together. No size limit beyond
/// the bytes themselves: a response is as long as its head says (an add's body may pass
/// the 64 KiB limit of the other values), and decoding a slice never reads, nor allocates
/// for a length prefix, more than it holds.
pub fn decode_response(bytes: &[u8]) -> Result<KeptResponse, CodecError> {
    let (&format, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if format != RESPONSE_V1 {
        return Err(CodecError::UnknownFormat(format));
    }
    let (value, read): (ResponseV1, usize) = bincode::serde::decode_from_slice(body, config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if read != body.len() {
        return Err(CodecError::Trailing(body.len() - read));
    }
    Ok(KeptResponse {
        status: value.status,
        headers: value.headers,
        body: value.body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_of_format_1_is_pinned_byte_for_byte_and_within_its_bound() {
        let head = HeadV1 {
            at: 1_700_000_000_000,
            fingerprint: [0xAB; 32],
            len: 8193,
        };
        let bytes = encode_head_v1(&head);
        // The time zigzag-encoded (2 × 1.7e12) as a varint: 0xFD, then eight bytes.
        let mut want = vec![
            HEAD_V1, 0xFD, 0x00, 0xD0, 0xCA, 0x9F, 0x17, 0x03, 0x00, 0x00,
        ];
        want.extend_from_slice(&[0xAB; 32]);
        want.extend_from_slice(&[0xFB, 0x01, 0x20]);
        assert_eq!(bytes, want);
        assert!(bytes.len() <= MAX_HEAD_BYTES);
        let read = decode_head(&bytes).unwrap();
        assert_eq!(
            (read.at, read.fingerprint, read.len),
            (head.at, head.fingerprint, head.len)
        );
        assert_eq!(read.inline, None);
        assert_eq!((read.chunks(), read.stored_chunks()), (2, 0..2));
        let widest = HeadV1 {
            at: i64::MIN,
            fingerprint: [0xFF; 32],
            len: u64::MAX,
        };
        assert_eq!(encode_head_v1(&widest).len(), MAX_HEAD_BYTES);
        assert!(decode_head(&[HEAD_V2 + 1]).is_err());
    }

    /// Format 2 carries the first chunk after the fields: a response of one chunk is the
    /// head alone; a longer one keeps its later chunks apart, numbered from 1.
    #[test]
    fn a_head_of_format_2_carries_the_first_chunk() {
        let fields = HeadV1 {
            at: 1_700_000_000_000,
            fingerprint: [0xAB; 32],
            len: 3,
        };
        let bytes = encode_head(&fields, b"xyz");
        let mut want = vec![
            HEAD_V2, 0xFD, 0x00, 0xD0, 0xCA, 0x9F, 0x17, 0x03, 0x00, 0x00,
        ];
        want.extend_from_slice(&[0xAB; 32]);
        want.extend_from_slice(&[3, b'x', b'y', b'z']);
        assert_eq!(bytes, want);
        let read = decode_head(&bytes).unwrap();
        assert_eq!(read.inline.as_deref(), Some(&b"xyz"[..]));
        assert_eq!((read.chunks(), read.stored_chunks()), (1, 1..1));
        assert_eq!(later_chunks(b"xyz").count(), 0);
        // A short or long inline part is refused.
        assert!(decode_head(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_head(&[&bytes[..], b"!"].concat()).is_err());

        let response = vec![7u8; 2 * RESPONSE_CHUNK_BYTES + 1];
        let fields = HeadV1 {
            len: response.len() as u64,
            ..fields
        };
        let bytes = encode_head(&fields, &response);
        assert_eq!(bytes.len(), MAX_HEAD_BYTES - 6 + RESPONSE_CHUNK_BYTES);
        assert!(bytes.len() <= MAX_VALUE_BYTES);
        let read = decode_head(&bytes).unwrap();
        assert_eq!((read.chunks(), read.stored_chunks()), (3, 1..3));
        let later: Vec<(u32, usize)> = later_chunks(&response)
            .map(|(n, chunk)| (n, chunk.len()))
            .collect();
        assert_eq!(later, [(1, RESPONSE_CHUNK_BYTES), (2, 1)]);
    }

    #[test]
    fn a_response_is_pinned_and_round_trips() {
        let response = KeptResponse {
            status: 201,
            headers: vec![("x-blocklist-revision".into(), b"7".to_vec())],
            body: Vec::new(),
        };
        let bytes = encode_response(&response);
        let mut want = vec![RESPONSE_V1, 201, 1, 20];
        want.extend_from_slice(b"x-blocklist-revision");
        want.extend_from_slice(&[1, b'7', 0]);
        assert_eq!(bytes, want);
        assert_eq!(decode_response(&bytes), Ok(response));
        let large = KeptResponse {
            status: 202,
            headers: Vec::new(),
            body: vec![b'x'; 200_000],
        };
        assert_eq!(decode_response(&encode_response(&large)), Ok(large));
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode_response(&trailing), Err(CodecError::Trailing(1)));
        // A length prefix that claims more than is there fails; it allocates nothing for it.
        let claims = [RESPONSE_V1, 201, 0, 0xFC, 0xFF, 0xFF, 0xFF, 0x7F];
        assert!(decode_response(&claims).is_err());
    }
}
