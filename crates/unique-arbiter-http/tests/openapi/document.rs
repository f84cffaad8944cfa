//! The OpenAPI document loaded with its schemas, and what the test has seen of it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use http::{Method, StatusCode};
use jsonschema::{Registry, Validator};
use serde_json::{Value, json};
use unique_wire::Route;

use crate::BASE;
use crate::server::Answer;

/// The document, its schemas ready to validate, and what the test has seen so far.
pub(crate) struct Document {
    pub(crate) root: Value,
    pub(crate) registry: Registry<'static>,
    pub(crate) seen: Mutex<BTreeSet<(String, String, String)>>,
}

impl Document {
    pub(crate) fn load() -> Self {
        // YAML 1.2 subset read by serde_norway straight into serde_json::Value (status keys are
        // quoted in the document, so every map key is a string as JSON needs).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let root: Value = serde_norway::from_str(&text).expect("docs/openapi.yaml is valid YAML");
        assert!(
            root["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.1.")),
            "not an OpenAPI 3.1 document"
        );
        let registry = Registry::new()
            .add(BASE, root.clone())
            .and_then(jsonschema::RegistryBuilder::prepare)
            .expect("the document registers as a schema resource");
        Self {
            root,
            registry,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// A validator for the schema at JSON pointer `pointer` in the document.
    pub(crate) fn validator(&self, pointer: &str) -> Validator {
        assert!(
            self.root.pointer(pointer).is_some(),
            "no schema at {pointer}"
        );
        jsonschema::draft202012::options()
            .with_registry(&self.registry)
            // A URI fragment cannot hold `{` or `}` (a templated path): percent-encoded.
            .build(&json!({"$ref": format!(
                "{BASE}#{}",
                pointer.replace('{', "%7B").replace('}', "%7D")
            )}))
            .unwrap_or_else(|e| panic!("schema at {pointer}: {e}"))
    }

    pub(crate) fn validate(&self, pointer: &str, instance: &Value, what: &str) {
        let errors: Vec<String> = self
            .validator(pointer)
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what} does not match {pointer}: {errors:?}\n{instance}"
        );
    }

    /// The operation object of `method path`, with its pointer, if the document has it.
    pub(crate) fn operation(&self, method: &Method, path: &str) -> Option<String> {
        // A concrete push-kick path (`/v1/nodes/n1/kicks`) is documented by its template.
        let path = match Route::from_path(path) {
            Some(route @ (Route::NodeKicks | Route::NodeKicksAck)) => route.path(),
            _ => path,
        };
        let pointer = format!(
            "/paths/{}/{}",
            escape(path),
            method.as_str().to_ascii_lowercase()
        );
        self.root.pointer(&pointer).map(|_| pointer)
    }

    /// Follows a `$ref` (local only) to the object it names, returning its pointer.
    pub(crate) fn resolve(&self, pointer: String) -> String {
        match self.root.pointer(&pointer).and_then(|v| v["$ref"].as_str()) {
            Some(target) => target.strip_prefix('#').expect("local $ref").to_owned(),
            None => pointer,
        }
    }

    /// Checks one real exchange against the document and records it as seen.
    pub(crate) fn check(
        &self,
        method: &Method,
        path: &str,
        request: Option<&Value>,
        answer: &Answer,
    ) {
        let status = answer.status.as_str().to_owned();
        let (operation, response) = match self.operation(method, path) {
            Some(op) => {
                let response = format!("{op}/responses/{status}");
                assert!(
                    self.root.pointer(&response).is_some(),
                    "{method} {path} answered {status}, which the document does not list: {:?}",
                    answer.body
                );
                (Some(op), response)
            }
            // No operation: the server's answers for unknown paths and methods.
            None if Route::from_path(path).is_some() => {
                assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
                (None, "/components/responses/MethodNotAllowed".to_owned())
            }
            None => {
                assert_eq!(answer.status, StatusCode::NOT_FOUND);
                (None, "/components/responses/NotFound".to_owned())
            }
        };
        let response = self.resolve(response);
        let what = format!("{method} {path} {status}");
        self.check_headers(&response, answer, &what);
        match self.root.pointer(&format!("{response}/content")) {
            Some(content) => {
                let media = answer.content_type.split(';').next().unwrap_or("").trim();
                assert!(
                    content.get(media).is_some(),
                    "{what}: content type {media:?} is not one of {content}"
                );
                let body = match media {
                    "application/json" => serde_json::from_slice(&answer.body)
                        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {:?}", answer.body)),
                    _ => Value::String(String::from_utf8(answer.body.to_vec()).unwrap()),
                };
                let schema = format!("{response}/content/{}/schema", escape(media));
                self.validate(&schema, &body, &what);
            }
            None => assert!(
                answer.body.is_empty(),
                "{what}: the document says no body, got {:?}",
                answer.body
            ),
        }
        if let (Some(op), Some(request), true) = (&operation, request, answer.status.is_success()) {
            let schema = format!("{op}/requestBody/content/application~1json/schema");
            self.validate(&schema, request, &format!("{what} request"));
        }
        let seen = operation.map_or_else(|| response.clone(), |op| format!("{op} {status}"));
        self.seen
            .lock()
            .unwrap()
            .insert((seen, method.to_string(), status));
    }

    pub(crate) fn check_headers(&self, response: &str, answer: &Answer, what: &str) {
        let Some(Value::Object(headers)) = self.root.pointer(&format!("{response}/headers")) else {
            return;
        };
        for (name, header) in headers {
            let value = answer.headers.get(name.as_str());
            if header["required"] == true {
                assert!(value.is_some(), "{what}: required header {name} missing");
            }
            if let Some(value) = value {
                let value = Value::String(value.to_str().unwrap().to_owned());
                let pointer = format!("{response}/headers/{}/schema", escape(name));
                self.validate(&pointer, &value, &format!("{what} header {name}"));
            }
        }
    }

    /// Every (operation, status) the document lists, plus the 404 and 405 components.
    pub(crate) fn documented(&self) -> BTreeSet<String> {
        let mut all = BTreeSet::from([
            "/components/responses/NotFound".to_owned(),
            "/components/responses/MethodNotAllowed".to_owned(),
        ]);
        for (path, item) in self.root["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for status in op["responses"].as_object().unwrap().keys() {
                    all.insert(format!("/paths/{}/{method} {status}", escape(path)));
                }
            }
        }
        all
    }
}

/// JSON pointer escaping of one reference token.
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
