//! A stand-in server, for what the real daemon cannot be made to do on cue: refuse a
//! token, or read a write and drop its connection unanswered. It takes one connection per
//! answer, in order, and hands back the heads of the requests it read.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread::JoinHandle;

/// What the stand-in does with the request of one connection.
pub enum Answer {
    /// Drops the connection unanswered, as a daemon killed after the write, or a lost answer.
    Drop,
    /// Writes this whole response.
    Reply(String),
}

/// Starts a stand-in giving `answers`; its URL, and the thread that ends with the heads of
/// the requests it read (lower case), one per answer.
pub fn stand_in(answers: Vec<Answer>) -> (String, JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let recorder = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for answer in answers {
            let (mut stream, _) = listener.accept().unwrap();
            heads.push(read_request(&mut stream));
            match answer {
                Answer::Drop => stream.shutdown(Shutdown::Both).unwrap(),
                Answer::Reply(response) => stream.write_all(response.as_bytes()).unwrap(),
            }
        }
        heads
    });
    (url, recorder)
}

/// Reads one HTTP request (head and `content-length` body) from `stream`; its head, lower
/// case.
pub fn read_request(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .map_or(0, |n| n.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    head
}

/// The value of `name` in a request head.
pub fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}: ")))
        .map(str::trim)
}
