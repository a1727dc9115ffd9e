//! The schema registry as the codec's client sees it: how it is reached (timeout,
//! credentials, CA), and whether a failed lookup is the registry's fault or the
//! record's.

use std::time::Duration;

use schema_registry_converter::blocking::schema_registry::SrSettings;
use schema_registry_converter::error::SRCError;

use super::CodecError;

const REGISTRY_TIMEOUT: Duration = Duration::from_secs(5);

/// The registry client's settings for `registry_url` (`shown` as errors name it).
pub(super) fn settings(registry_url: &str, shown: &str) -> Result<SrSettings, CodecError> {
    let registry = |reason: String| CodecError::Registry { url: shown.to_string(), reason };
    // A registry that does not answer in time counts as down (the member retries);
    // the client's default of 30 s would stall the processing loop.
    let security = crate::connection::security();
    let mut settings = SrSettings::new_builder(registry_url.to_string());
    settings.set_timeout(REGISTRY_TIMEOUT);
    if let Some((username, password)) = &security.registry_credentials {
        settings.set_basic_authorization(username, Some(password));
    }
    let mut client = reqwest::blocking::ClientBuilder::new();
    if let Some(ca) = &security.registry_ca {
        let pem = std::fs::read(ca).map_err(|e| registry(format!("cannot read the CA file {}: {e}", ca.display())))?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| registry(format!("{} is not a PEM file of certificates: {e}", ca.display())))?;
        for certificate in certificates {
            client = client.add_root_certificate(certificate);
        }
    }
    settings.build_with(client).map_err(|e| registry(e.to_string()))
}

/// Whether a registry client error says the registry could not be used (down, slow,
/// refusing the credentials, failing, not at that address, answering something that
/// is not a schema) rather than that it has no schema of that id (404 with error
/// code 40403, as Confluent's and Apicurio's registries answer) or the schema it has
/// is unusable. Only the latter is the record's fault and makes it a dead letter.
/// The client calls some of the former not retriable (a 500, a body cut short by the
/// timeout); taken for the record's fault, a valid record would go to the dead
/// letters for a moment's trouble of the registry, and every record to them for a
/// wrong registry path.
pub(super) fn registry_fault(e: &SRCError) -> bool {
    let transport = std::error::Error::source(e).is_some_and(|s| s.is::<reqwest::Error>());
    let status = e.error.strip_prefix("HTTP request to schema registry failed with status ");
    match status.and_then(|s| s.get(..3)).and_then(|code| code.parse::<u16>().ok()) {
        Some(404) => !e.cause.as_deref().is_some_and(|c| c.contains("40403")),
        Some(_) => true,
        None => e.retriable || transport,
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::writer::datum::GenericDatumWriter;
    use apache_avro::Schema;
    use vigil_model::topology::{Topic, PAYMENTS};
    use vigil_model::Payment;

    use super::super::{Codec, CodecError};

    /// A registry stand-in that answers each connection with the next of `responses`
    /// (raw HTTP), the last one for good: the registry's failures on demand, which a
    /// real registry gives only by chance.
    fn registry_answering(responses: Vec<String>) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut responses = responses.into_iter().peekable();
            for conn in listener.incoming() {
                let mut conn = conn.unwrap();
                let mut request = Vec::new();
                let mut buf = [0; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = conn.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let response = match responses.len() {
                    1 => responses.peek().unwrap().clone(),
                    _ => responses.next().unwrap(),
                };
                let _ = conn.write_all(response.as_bytes());
            }
        });
        url
    }

    fn answer(status: &str, body: &str) -> String {
        format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
    }

    /// The payments schema as the registry returns it for an id.
    fn payments_schema() -> String {
        let schema = Schema::parse_str(PAYMENTS.schema).unwrap().canonical_form();
        answer("200 OK", &serde_json::json!({ "schema": schema }).to_string())
    }

    fn a_payment_under_schema_id(id: u32) -> Vec<u8> {
        let payment = Payment {
            payment_id: "pay-1".into(),
            order_id: "order-1".into(),
            paid_amount: 12.5,
            payment_ts: 1_700_000_000_000,
            method: "card".into(),
        };
        let schema = Schema::parse_str(PAYMENTS.schema).unwrap();
        let mut bytes = vec![0];
        bytes.extend_from_slice(&id.to_be_bytes());
        bytes.extend(GenericDatumWriter::builder(&schema).build().unwrap().write_ser_to_vec(&payment).unwrap());
        bytes
    }

    #[test]
    fn a_registry_that_fails_is_the_registrys_fault_and_an_unknown_id_the_records() {
        let record = a_payment_under_schema_id(7);
        let cut_short = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\nConnection: close\r\n\r\n{\"sch".to_string();
        let failing = [
            answer("500 Internal Server Error", r#"{"error_code":50001,"message":"storage"}"#),
            answer("401 Unauthorized", r#"{"error_code":40101,"message":"who"}"#),
            cut_short,
            answer("200 OK", "<html>a proxy's page</html>"),
            answer("404 Not Found", r#"{"error_code":404,"message":"HTTP 404 Not Found"}"#),
        ];
        for response in failing {
            let codec = Codec::new(&registry_answering(vec![response.clone()])).unwrap();
            let got = codec.decode::<Payment>(&PAYMENTS, &record);
            assert!(matches!(got, Err(CodecError::Registry { .. })), "{response:?} gave {got:?}");
        }
        let unknown = answer("404 Not Found", r#"{"message":"No content with ID '7' was found.","error_code":40403}"#);
        let codec = Codec::new(&registry_answering(vec![unknown])).unwrap();
        assert!(matches!(codec.decode::<Payment>(&PAYMENTS, &record), Err(CodecError::Decode(_))));
    }

    #[test]
    fn a_record_read_while_the_registry_fails_is_read_once_it_answers_again() {
        let record = a_payment_under_schema_id(7);
        let failure = answer("500 Internal Server Error", r#"{"error_code":50001,"message":"storage"}"#);
        let codec = Codec::new(&registry_answering(vec![failure.clone(), failure, payments_schema()])).unwrap();
        for _ in 0..2 {
            assert!(matches!(codec.decode::<Payment>(&PAYMENTS, &record), Err(CodecError::Registry { .. })));
        }
        assert_eq!(codec.decode::<Payment>(&PAYMENTS, &record).unwrap().payment_id, "pay-1");
    }

    /// A topic of payments under a schema of its own name, which no other test
    /// parses: what the codec knows of it, it learnt here.
    static PAYMENTS_ELSEWHERE: Topic = Topic::new("payments-elsewhere", "order_id", None, PAYMENTS_ELSEWHERE_SCHEMA);
    const PAYMENTS_ELSEWHERE_SCHEMA: &str = r#"{"type": "record", "name": "Elsewhere", "namespace": "dev.vigil.test",
        "fields": [{"name": "payment_id", "type": "string"}, {"name": "order_id", "type": "string"},
        {"name": "paid_amount", "type": "double"}, {"name": "payment_ts", "type": "long"},
        {"name": "method", "type": "string"}]}"#;

    #[test]
    fn after_a_topics_first_value_its_schema_id_is_read_by_the_topics_own_reader() {
        let schema = Schema::parse_str(PAYMENTS_ELSEWHERE_SCHEMA).unwrap();
        let body = serde_json::json!({ "schema": schema.canonical_form() }).to_string();
        let codec = Codec::new(&registry_answering(vec![answer("200 OK", &body)])).unwrap();
        let payment = Payment {
            payment_id: "pay-2".into(),
            order_id: "order-2".into(),
            paid_amount: 3.0,
            payment_ts: 1_700_000_000_000,
            method: "card".into(),
        };
        let mut record = vec![0, 0, 0, 0, 9];
        record.extend(GenericDatumWriter::builder(&schema).build().unwrap().write_ser_to_vec(&payment).unwrap());
        for _ in 0..2 {
            assert_eq!(codec.decode::<Payment>(&PAYMENTS_ELSEWHERE, &record).unwrap(), payment);
        }
        let reader = codec.read_ids.read().unwrap().get(&9).copied().flatten().map(|own| own.topic);
        assert_eq!(reader, Some("payments-elsewhere"), "id 9 is read the generic way for good");
    }
}
