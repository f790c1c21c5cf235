//! The WHIP calls a participant makes (RFC 9725): `POST` the offer to the endpoint,
//! read `201 Created`, the answer and `Location`; `DELETE` the resource to leave.
//! Plain HTTP/1.1 on loopback, one connection per request, with hyper's client
//! connection; every request has a deadline.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST, LOCATION};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long one WHIP request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A joined WHIP session: the answer and the resource to `DELETE`.
#[derive(Debug)]
pub struct Session {
    /// The answer SDP.
    pub answer: String,
    /// The absolute URL of the session resource (from `Location`).
    pub resource: String,
}

/// What an HTTP request returned.
struct Response {
    status: StatusCode,
    location: Option<String>,
    body: Bytes,
}

/// `POST`s `offer` to the WHIP endpoint `url`; a session on `201 Created` with a body
/// and a `Location`.
pub async fn post_offer(url: &str, offer: &str) -> Result<Session, String> {
    let response = request(
        Method::POST,
        url,
        Some(("application/sdp", offer.to_owned())),
    )
    .await?;
    if response.status != StatusCode::CREATED {
        return Err(format!(
            "WHIP POST {url} answered {} {:?}",
            response.status,
            String::from_utf8_lossy(&response.body)
        ));
    }
    let location = response
        .location
        .ok_or_else(|| format!("WHIP POST {url}: 201 without a Location header"))?;
    let answer = String::from_utf8(response.body.to_vec())
        .map_err(|e| format!("WHIP POST {url}: the answer is not UTF-8: {e}"))?;
    if answer.is_empty() {
        return Err(format!("WHIP POST {url}: 201 with an empty body"));
    }
    Ok(Session {
        answer,
        resource: resolve_location(url, &location)?,
    })
}

/// `DELETE`s a WHIP session resource; any 2xx is success.
pub async fn delete(resource: &str) -> Result<(), String> {
    let response = request(Method::DELETE, resource, None).await?;
    if !response.status.is_success() {
        return Err(format!(
            "WHIP DELETE {resource} answered {}",
            response.status
        ));
    }
    Ok(())
}

/// The absolute URL that `location` (absolute, or a path on the same origin, as WHIP
/// servers usually send) names, relative to the request URL `base`.
pub fn resolve_location(base: &str, location: &str) -> Result<String, String> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Ok(location.to_owned());
    }
    let uri: Uri = base.parse().map_err(|e| format!("URL {base:?}: {e}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("URL {base:?} is not absolute"));
    };
    if location.starts_with('/') {
        return Ok(format!("{scheme}://{authority}{location}"));
    }
    // A relative path: replace the last segment of the base path.
    let path = uri.path();
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let dir = if dir.is_empty() { "/" } else { dir };
    Ok(format!("{scheme}://{authority}{dir}{location}"))
}

async fn request(
    method: Method,
    url: &str,
    body: Option<(&str, String)>,
) -> Result<Response, String> {
    let what = format!("{method} {url}");
    tokio::time::timeout(REQUEST_TIMEOUT, send(method, url, body))
        .await
        .map_err(|_| format!("{what}: no response within {REQUEST_TIMEOUT:?}"))?
        .map_err(|e| format!("{what}: {e}"))
}

async fn send(method: Method, url: &str, body: Option<(&str, String)>) -> Result<Response, String> {
    let uri: Uri = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err("only http:// URLs are supported".into());
    }
    let authority = uri.authority().ok_or("no host in the URL")?.clone();
    let port = authority.port_u16().unwrap_or(80);
    let stream = TcpStream::connect((authority.host(), port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let driver = tokio::spawn(connection);

    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, authority.as_str());
    let body = match body {
        Some((content_type, text)) => {
            builder = builder.header(CONTENT_TYPE, content_type);
            Full::new(Bytes::from(text))
        }
        None => Full::new(Bytes::new()),
    };
    let request = builder.body(body).map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .map(|v| {
            v.to_str()
                .map(str::to_owned)
                .map_err(|e| format!("Location header: {e}"))
        })
        .transpose()?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("response body: {e}"))?
        .to_bytes();
    driver.abort();
    Ok(Response {
        status,
        location,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::resolve_location;

    #[test]
    fn locations_resolve_against_the_endpoint() {
        let base = "http://127.0.0.1:8080/whip/room?identity=a";
        assert_eq!(
            resolve_location(base, "/whip/room/abc").as_deref(),
            Ok("http://127.0.0.1:8080/whip/room/abc")
        );
        assert_eq!(
            resolve_location(base, "http://127.0.0.1:9/x").as_deref(),
            Ok("http://127.0.0.1:9/x")
        );
        assert_eq!(
            resolve_location(base, "room/abc").as_deref(),
            Ok("http://127.0.0.1:8080/whip/room/abc")
        );
        assert!(resolve_location("/whip/room", "abc").is_err());
    }
}
