//! Server-Sent Events: the daemon's change feed (`GET /blocklist/events`) as it arrives,
//! for `blocklist watch` and for the bridges that follow the feed (`blocklist-kube`).

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

/// An incremental `text/event-stream` parser (the WHATWG rules that matter here): lines
/// end in LF or CRLF, a blank line ends an event, `:` lines are comments (heartbeats),
/// several `data:` lines join with LF, one space after the colon is dropped. Bytes are
/// buffered until a line is complete, so a chunk may split a line or a UTF-8 character.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    id: Option<u64>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(at) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + at;
            let mut line = &self.buf[start..end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buf.drain(..start);
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take();
            let event = self.event.take();
            let id = self.id.take();
            return data.map(|data| SseEvent {
                id,
                event: event.unwrap_or_else(|| "message".into()),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "id" => self.id = value.trim().parse().ok(),
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {} // "retry" and unknown fields: nothing to do
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_split_anywhere() {
        let stream = "id: 42\nevent: merged\ndata: {\"id\":\"n\u{fc}\"}\n\n: heartbeat\n\n\
                      id:43\r\nevent:added\r\ndata:{\"a\":1}\r\n\r\n";
        let expected = vec![
            SseEvent {
                id: Some(42),
                event: "merged".into(),
                data: "{\"id\":\"n\u{fc}\"}".into(),
            },
            SseEvent {
                id: Some(43),
                event: "added".into(),
                data: "{\"a\":1}".into(),
            },
        ];
        // Every split point, including inside the two-byte ü.
        let bytes = stream.as_bytes();
        for cut in 0..bytes.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&bytes[..cut]);
            events.extend(parser.push(&bytes[cut..]));
            assert_eq!(events, expected, "cut at {cut}");
        }
    }

    #[test]
    fn multi_line_data_and_defaults() {
        let mut parser = SseParser::default();
        let events = parser.push(b"data: a\ndata: b\n\nid: 7\n\n");
        // The second block has no data: per the SSE rules it dispatches nothing.
        assert_eq!(
            events,
            [SseEvent {
                id: None,
                event: "message".into(),
                data: "a\nb".into()
            }]
        );
    }
}
