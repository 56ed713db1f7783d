//! The HTTP client of streamable-HTTP MCP servers: rmcp's reqwest client, plus the call's
//! W3C `traceparent` as a header.
//!
//! rmcp sends a server's messages from a task of its own and takes its headers per transport,
//! not per request, so a call's span cannot reach the header from the caller. It can reach it
//! through the message: every `tools/call` carries its span in `params._meta.traceparent`
//! (MCP's SEP-414, what stdio servers read too), and [`Traced`] copies that into the header of
//! the POST that carries it. Everything else is rmcp's reqwest client unchanged, its response
//! limits included. Must not add a header a message did not ask for.

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, JsonRpcRequest, RequestMetaObject,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use std::collections::HashMap;
use std::sync::Arc;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// rmcp's reqwest client, sending a call's `_meta.traceparent` as the `traceparent` header.
#[derive(Clone)]
pub(crate) struct Traced(pub reqwest::Client);

/// The `traceparent` a message carries in `params._meta`: only a `tools/call` has one of ours.
/// rmcp keeps `_meta` in two places that it merges on the wire (the params' own, where ours is
/// set, and the request's extensions); either counts.
fn traceparent_of(message: &ClientJsonRpcMessage) -> Option<HeaderValue> {
    let JsonRpcMessage::Request(JsonRpcRequest {
        request: ClientRequest::CallToolRequest(call),
        ..
    }) = message
    else {
        return None;
    };
    let value = call
        .params
        .meta
        .as_ref()
        .and_then(|meta| meta.get_traceparent())
        .or_else(|| {
            call.extensions
                .get::<RequestMetaObject>()
                .and_then(|meta| meta.get_traceparent())
        })?;
    HeaderValue::from_str(value).ok()
}

fn with_traceparent(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let Some(value) = traceparent_of(message) {
        headers.insert(TRACEPARENT, value);
    }
    headers
}

impl StreamableHttpClient for Traced {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_traceparent(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_traceparent(&message, custom_headers);
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_traceparent(&message, custom_headers);
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequestParams, Request, RequestId};

    fn call(meta: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("add");
        if let Some(tp) = meta {
            let mut m = RequestMetaObject::new();
            m.set_traceparent(tp);
            params.meta = Some(m);
        }
        JsonRpcMessage::Request(JsonRpcRequest::new(
            RequestId::Number(1),
            ClientRequest::CallToolRequest(Request::new(params)),
        ))
    }

    #[test]
    fn a_calls_traceparent_becomes_its_header_and_nothing_else_gets_one() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let headers = with_traceparent(&call(Some(tp)), HashMap::new());
        assert_eq!(headers.get(&TRACEPARENT).unwrap(), tp);
        assert!(with_traceparent(&call(None), HashMap::new()).is_empty());
        // A value that cannot be a header is dropped, not sent broken.
        assert!(with_traceparent(&call(Some("a\nb")), HashMap::new()).is_empty());
    }
}
