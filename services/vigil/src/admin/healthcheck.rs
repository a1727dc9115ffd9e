//! `vigil healthcheck URL`: exits 0 if the URL answers 200, for container
//! healthchecks in images without curl.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// One HTTP/1.0 GET; healthy if the status is 200.
pub fn run(url: &str) -> Result<()> {
    let rest = url.strip_prefix("http://").with_context(|| format!("`{url}` is not an http:// URL"))?;
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve `{authority}`"))?
        .next()
        .with_context(|| format!("`{authority}` has no address"))?;
    let timeout = Duration::from_secs(3);
    let mut conn = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("cannot connect to {addr}"))?;
    conn.set_read_timeout(Some(timeout))?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n")?;
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    let status = answer.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default().trim();
        bail!("{url} answered `{status}`: {body}")
    }
}
