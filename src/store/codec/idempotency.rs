//! The values of the `idempotency` tree: a record's head, and the response its chunks hold.
//!
//! A record is one request's `Idempotency-Key`, the fingerprint of that request and the
//! response it was answered, stored in the transaction of its write
//! (`store::commit::idempotency`). The response is encoded whole ([`encode_response`]) and
//! cut into chunks of at most [`RESPONSE_CHUNK_BYTES`], each under a key of its own, so no
//! value of the tree is larger than that, however large the body (an add's 202 lists every
//! merged item): the bound `store::blobs` needs.

use serde::{Deserialize, Serialize};

use super::{config, decode_framed, encode_framed, CodecError, VARINT};

/// Format byte of [`HeadV1`], a record's head (the `idempotency` tree of schema 7 starts
/// empty: no migration).
pub const HEAD_V1: u8 = 1;

/// Format byte of [`ResponseV1`]: the first byte of a record's response bytes (the first
/// chunk's first byte).
pub const RESPONSE_V1: u8 = 1;

/// The most bytes of a record's encoded response one chunk holds.
pub const RESPONSE_CHUNK_BYTES: usize = 8 * 1024;

/// The largest head: the format byte, the commit time, the 32 fingerprint bytes (a fixed
/// array: no length), the response's length.
pub const MAX_HEAD_BYTES: usize = 1 + VARINT + 32 + VARINT;

/// The largest value of the `idempotency` tree: a full chunk (a head is far smaller; the
/// time index's values are empty).
pub const MAX_VALUE_BYTES: usize = if RESPONSE_CHUNK_BYTES > MAX_HEAD_BYTES {
    RESPONSE_CHUNK_BYTES
} else {
    MAX_HEAD_BYTES
};

/// A record's head, format 1. Frozen like every value struct (`super`): field order and
/// types are the on-disk layout.
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

impl HeadV1 {
    /// How many chunks hold the response.
    pub fn chunks(&self) -> u64 {
        self.len.div_ceil(RESPONSE_CHUNK_BYTES as u64)
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

pub fn encode_head(head: &HeadV1) -> Vec<u8> {
    encode_framed(HEAD_V1, head)
}

pub fn decode_head(bytes: &[u8]) -> Result<HeadV1, CodecError> {
    decode_framed(HEAD_V1, bytes)
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
    fn a_head_is_pinned_byte_for_byte_and_within_its_bound() {
        let head = HeadV1 {
            at: 1_700_000_000_000,
            fingerprint: [0xAB; 32],
            len: 8193,
        };
        let bytes = encode_head(&head);
        // The time zigzag-encoded (2 × 1.7e12) as a varint: 0xFD, then eight bytes.
        let mut want = vec![
            HEAD_V1, 0xFD, 0x00, 0xD0, 0xCA, 0x9F, 0x17, 0x03, 0x00, 0x00,
        ];
        want.extend_from_slice(&[0xAB; 32]);
        want.extend_from_slice(&[0xFB, 0x01, 0x20]);
        assert_eq!(bytes, want);
        assert!(bytes.len() <= MAX_HEAD_BYTES);
        assert_eq!(decode_head(&bytes), Ok(head));
        assert_eq!(head.chunks(), 2);
        let widest = HeadV1 {
            at: i64::MIN,
            fingerprint: [0xFF; 32],
            len: u64::MAX,
        };
        assert_eq!(encode_head(&widest).len(), MAX_HEAD_BYTES);
        assert!(decode_head(&[HEAD_V1 + 1]).is_err());
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
