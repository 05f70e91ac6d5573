//! Reading HTTP/1.1 requests off a connection, for the proxies that stand
//! between a source and a real node: one reader, so they all take the same
//! requests (keep-alive ones included) the same way.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The next request on `conn`: its head and body. `buf` keeps what was read
/// past it, for the next request on a keep-alive connection. `None` when
/// the client closed the connection between two requests.
pub async fn next_request(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<Option<(String, Vec<u8>)>, String> {
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if !read_more(conn, buf).await? {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
    let body_len = header(&head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .ok_or_else(|| format!("a request without Content-Length: {head}"))?;
    while buf.len() < head_len + body_len {
        if !read_more(conn, buf).await? {
            return Err("the client closed the connection mid-request".into());
        }
    }
    let body: Vec<u8> = buf.drain(..head_len + body_len).skip(head_len).collect();
    Ok(Some((head, body)))
}

/// A header's value in a request head, by case-insensitive name.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

async fn read_more(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Result<bool, String> {
    let mut chunk = [0u8; 16 * 1024];
    let n = conn.read(&mut chunk).await.map_err(|e| e.to_string())?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}
