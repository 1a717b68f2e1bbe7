//! Trace context across gRPC: a caller's span, sent by the SDK, is the parent of the span a
//! writer process handles the call in, as the writer exports it over OTLP to a receiver the
//! test runs (the OTLP trace service, on 127.0.0.1).

use std::sync::Mutex;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tracing::Instrument;
use tracing::instrument::WithSubscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use super::*;

/// A span as received: its service, name, ids and attributes.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    name: String,
    trace_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: Vec<(String, String)>,
}

/// An OTLP trace receiver that keeps every span exported to it.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref()))
                .unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    service: service.clone(),
                    name: span.name,
                    trace_id: span.trace_id,
                    parent_span_id: span.parent_span_id,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|a| (a.key.clone(), text(a.value.as_ref())))
                        .collect(),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_continues_the_callers_trace_and_exports_it_over_otlp() -> Result<()> {
    let receiver = Receiver::default();
    let otlp = std::net::TcpListener::bind("127.0.0.1:0")?;
    let otlp_port = otlp.local_addr()?.port();
    otlp.set_nonblocking(true)?;
    let incoming =
        tonic::transport::server::TcpIncoming::from(tokio::net::TcpListener::from_std(otlp)?);
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(incoming),
    );

    let cluster = Cluster::start()?;
    let port = testkit::free_port()?;
    let section = format!(
        "  otlp_endpoint: http://127.0.0.1:{otlp_port}\nwriter:\n  listen: 127.0.0.1:{port}\n  id: wtrace\n  flush_interval: 10ms\n"
    );
    let mut w = cluster.spawn("writer", "wtrace", &section, port)?;

    // The caller: an application with OpenTelemetry over `tracing`, and W3C propagation.
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("e2e")));
    let url = format!("http://127.0.0.1:{port}");
    let (trace_id, span_id) = async {
        let span = tracing::info_span!("produce");
        let context = span.context().span().span_context().clone();
        async {
            let writer = client::LogClient::connect(&url).await?;
            let log = writer.create_log().await?;
            writer.append(log, 1, client::batch::encode(&[Record::value("traced")])?, None).await?;
            anyhow::Ok(())
        }
        .instrument(span)
        .await?;
        anyhow::Ok((context.trace_id().to_bytes().to_vec(), context.span_id().to_bytes().to_vec()))
    }
    .with_subscriber(subscriber)
    .await?;
    ensure!(trace_id != [0; 16], "the caller's span has no trace id");

    // SIGTERM: the writer flushes its span batch on the way out.
    let status = w.terminate(Duration::from_secs(20))?;
    ensure!(status.success(), "the writer exited with {status}:\n{}", w.output());
    let start = Instant::now();
    let append = loop {
        let spans = receiver.spans.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let found = spans.iter().find(|s| s.name.ends_with("/Append")).cloned();
        if let Some(s) = found {
            break s;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(10),
            "no Append span reached the receiver; got {spans:?}\n{}",
            w.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    serving.abort();
    ensure!(append.service == "lakelog-writer", "{append:?}");
    ensure!(append.name == "/lakelog.log.v1.LogService/Append", "{append:?}");
    ensure!(
        append.trace_id == trace_id,
        "the writer's span is not in the caller's trace: {append:?}"
    );
    ensure!(append.parent_span_id == span_id, "its parent is not the caller's span: {append:?}");
    ensure!(
        append.attributes.contains(&("rpc.grpc.status_code".to_owned(), "0".to_owned())),
        "{append:?}"
    );
    Ok(())
}
