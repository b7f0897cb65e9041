//! A child's output read as lines, whatever it prints: bytes, not text, so that an invalid byte is shown
//! as U+FFFD rather than ending the read; each line kept to a bound, the rest of it passed over; and the
//! stream read to its end, so that a hook never writes into a closed pipe (and dies of SIGPIPE) because
//! of what it logged.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// The most of one line that is kept: shell-operator cuts its hooks' log lines at 10,000 characters.
pub const MAX_LINE_CHARS: usize = 10_000;

/// Lines of a stream, each at most `MAX_LINE_CHARS` characters.
pub struct Lines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    pub fn new(stream: R) -> Self {
        Lines { reader: BufReader::new(stream), line: Vec::new() }
    }

    /// The next line without its line ending, decoded lossily and cut to `MAX_LINE_CHARS`; None at the
    /// end of the stream (or when it cannot be read any more).
    pub async fn next(&mut self) -> Option<String> {
        // Up to four bytes a character, so that a line of 10,000 characters of any script is kept whole.
        let keep = MAX_LINE_CHARS * 4;
        self.line.clear();
        let mut any = false;
        // A read error ends the stream as its end does.
        while let Ok(available) = self.reader.fill_buf().await {
            if available.is_empty() {
                break;
            }
            any = true;
            let (part, used, done) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], at + 1, true),
                None => (available, available.len(), false),
            };
            let room = keep.saturating_sub(self.line.len());
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            self.reader.consume(used);
            if done {
                return Some(decode(&self.line));
            }
        }
        any.then(|| decode(&self.line))
    }
}

fn decode(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = String::from_utf8_lossy(line);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => text[..at].to_owned(),
        None => text.into_owned(),
    }
}

/// Reads `stream` to its end, calling `each` with every line.
pub async fn each_line(stream: impl AsyncRead + Unpin, mut each: impl FnMut(String)) {
    let mut lines = Lines::new(stream);
    while let Some(line) = lines.next().await {
        each(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(bytes: &[u8]) -> Vec<String> {
        let mut got = Vec::new();
        each_line(bytes, |line| got.push(line)).await;
        got
    }

    #[tokio::test]
    async fn invalid_bytes_are_replaced_and_reading_goes_on() {
        assert_eq!(all(b"ok\n\xff\xfebad\r\nafter").await, ["ok", "\u{fffd}\u{fffd}bad", "after"]);
        assert_eq!(all(b"").await, Vec::<String>::new());
        assert_eq!(all(b"\n\n").await, ["", ""]);
    }

    #[tokio::test]
    async fn a_long_line_is_cut_and_the_next_one_read() {
        let mut bytes = vec![b'x'; 5 << 20];
        bytes.extend_from_slice(b"\nnext\n");
        let got = all(&bytes).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), MAX_LINE_CHARS);
        assert_eq!(got[1], "next");

        let wide = "é".repeat(MAX_LINE_CHARS + 5);
        let got = all(wide.as_bytes()).await;
        assert_eq!(got[0].chars().count(), MAX_LINE_CHARS, "characters, not bytes");
    }
}
