//! The OpenAPI 3.0 description of the API, served at `GET /v1/openapi.json`.

use serde_json::{json, Value};

/// Every route: (method, path, needs the token).
pub const ROUTES: [(&str, &str, bool); 14] = [
    ("get", "/healthz", false),
    ("get", "/metrics", false),
    ("get", "/v1/openapi.json", false),
    ("get", "/v1/cluster", false),
    ("get", "/v1/jobs", false),
    ("post", "/v1/jobs", true),
    ("get", "/v1/jobs/{id}", false),
    ("delete", "/v1/jobs/{id}", true),
    ("get", "/v1/jobs/{id}/logs", false),
    ("get", "/v1/jobs/{id}/allocations", false),
    ("post", "/v1/jobs/{id}/metrics", true),
    ("post", "/v1/jobs/{id}/complete", true),
    ("get", "/v1/profiles", false),
    ("put", "/v1/profiles/{name}", true),
];

fn json_body(schema: &str) -> Value {
    json!({"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn ok(description: &str, schema: Option<&str>) -> Value {
    match schema {
        Some(s) => {
            let mut v = json_body(s);
            v["description"] = json!(description);
            v
        }
        None => json!({"description": description}),
    }
}

fn error(description: &str) -> Value {
    ok(description, Some("Error"))
}

fn operation(method: &str, path: &str, secured: bool) -> Value {
    let id_param =
        json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let mut op = match (method, path) {
        ("get", "/healthz") => {
            json!({"summary": "Liveness", "responses": {"200": {"description": "alive",
            "content": {"application/json": {"schema": {"type": "object", "properties": {"status": {"type": "string"}}}}}}}})
        }
        ("get", "/metrics") => {
            json!({"summary": "Prometheus metrics", "responses": {"200": {"description": "text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}}}}})
        }
        ("get", "/v1/openapi.json") => {
            json!({"summary": "This document", "responses": {"200": {"description": "OpenAPI 3 document",
            "content": {"application/json": {"schema": {"type": "object"}}}}}})
        }
        ("get", "/v1/cluster") => {
            json!({"summary": "Slots, their jobs and the last allocator decision",
            "responses": {"200": ok("cluster", Some("Cluster"))}})
        }
        ("get", "/v1/jobs") => {
            json!({"summary": "All jobs in submission order", "responses": {"200": {"description": "jobs",
            "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}}}}}})
        }
        ("post", "/v1/jobs") => {
            json!({"summary": "Submit a job (answered after it is committed to the database)",
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobSubmission"}}}},
            "responses": {"201": ok("accepted", Some("Job")), "400": error("invalid request; `field` names the field"),
                "409": error("a job with this id exists"), "413": {"description": "body larger than 1 MiB"}}})
        }
        ("get", "/v1/jobs/{id}") => {
            json!({"summary": "One job with its recent events", "parameters": id_param,
            "responses": {"200": ok("job", Some("Job")), "404": error("unknown job")}})
        }
        ("delete", "/v1/jobs/{id}") => {
            json!({"summary": "Cancel a job (a running one is stopped with SIGTERM, then SIGKILL after the grace period)",
            "parameters": id_param, "responses": {"202": ok("cancelling or cancelled", Some("Job")),
                "404": error("unknown job"), "409": error("the job already ended")}})
        }
        ("get", "/v1/jobs/{id}/logs") => json!({"summary": "Tail of the job's log file",
            "parameters": [id_param[0].clone(), {"name": "tail_bytes", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0, "default": 65536}}],
            "responses": {"200": {"description": "log text", "content": {"text/plain": {"schema": {"type": "string"}}}}, "404": error("unknown job")}}),
        ("get", "/v1/jobs/{id}/allocations") => {
            json!({"summary": "Allocations applied to the job, one per launch", "parameters": id_param,
            "responses": {"200": {"description": "allocations", "content": {"application/json": {"schema": {"type": "array",
                "items": {"$ref": "#/components/schemas/Allocation"}}}}}, "404": error("unknown job")}})
        }
        ("post", "/v1/jobs/{id}/metrics") => {
            json!({"summary": "Progress report of a job's chief worker", "parameters": id_param,
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MetricsReport"}}}},
            "responses": {"202": {"description": "recorded"}, "400": error("invalid report"), "404": error("unknown job"),
                "409": error("the job has ended")}})
        }
        ("post", "/v1/jobs/{id}/complete") => {
            json!({"summary": "The workers of the current launch report that training completed: the job succeeds when the launch exits, even if a stop was asked for meanwhile", "parameters": id_param,
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionReport"}}}},
            "responses": {"202": {"description": "recorded"}, "400": error("invalid report"), "404": error("unknown job"),
                "409": error("the job is not running that attempt")}})
        }
        ("get", "/v1/profiles") => {
            json!({"summary": "Stored throughput profiles", "responses": {"200": {"description": "profiles",
            "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Profile"}}}}}}})
        }
        ("put", "/v1/profiles/{name}") => {
            json!({"summary": "Store a throughput profile (jobs use it with `profile = name`)",
            "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ProfileUpload"}}}},
            "responses": {"200": ok("stored", Some("Profile")), "400": error("invalid model")}})
        }
        _ => json!({"responses": {}}),
    };
    if secured {
        op["security"] = json!([{"bearer": []}]);
        op["responses"]["401"] = error("missing or wrong bearer token");
    }
    op
}

fn schemas() -> Value {
    let analytic = json!({"type": "object", "required": ["compute_per_sample_s"], "properties": {
        "compute_base_s": {"type": "number", "minimum": 0}, "compute_per_sample_s": {"type": "number", "minimum": 0},
        "sync_intra_base_s": {"type": "number", "minimum": 0}, "sync_intra_per_gpu_s": {"type": "number", "minimum": 0},
        "sync_inter_base_s": {"type": "number", "minimum": 0}, "sync_inter_per_gpu_s": {"type": "number", "minimum": 0},
        "max_local_batch": {"type": "integer", "minimum": 1, "nullable": true}}});
    json!({
        "Error": {"type": "object", "required": ["error"], "properties": {
            "error": {"type": "string"}, "field": {"type": "string", "description": "the request field at fault"}}},
        "AnalyticModel": analytic,
        "JobSubmission": {"type": "object", "required": ["id", "min_batch", "max_batch", "command", "workdir"],
            "description": "The fields of a job-file entry plus how to run the job. Without `model` the job uses `profile`, or a model fitted from its own metrics.",
            "properties": {
                "id": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"},
                "model": {"oneOf": [{"type": "string", "description": "bundled profile name"}, {"$ref": "#/components/schemas/AnalyticModel"}]},
                "profile": {"type": "string", "description": "stored profile to use when `model` is absent"},
                "min_batch": {"type": "integer", "minimum": 1}, "max_batch": {"type": "integer", "minimum": 1},
                "max_local_batch": {"type": "integer", "minimum": 1}, "min_gpus": {"type": "integer", "minimum": 1, "default": 1},
                "max_gpus": {"type": "integer", "minimum": 1}, "powers_of_two": {"type": "boolean", "default": false},
                "batch_size": {"type": "integer"}, "gpus": {"type": "integer"},
                "work_samples": {"type": "number"}, "epochs": {"type": "number"}, "dataset_samples": {"type": "number"},
                "weight": {"type": "number", "default": 1}, "epoch": {"type": "integer", "default": 0},
                "command": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "workdir": {"type": "string", "description": "absolute directory"},
                "launcher": {"type": "string", "enum": ["torchrun", "plain"], "default": "torchrun"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "max_retries": {"type": "integer", "minimum": 0}}},
        "Event": {"type": "object", "properties": {"at": {"type": "number"}, "kind": {"type": "string"}, "detail": {"type": "string"}}},
        "Job": {"type": "object", "properties": {
            "id": {"type": "string"},
            "state": {"type": "string", "enum": ["queued", "running", "stopping", "succeeded", "failed", "cancelled", "dropped"]},
            "model": {"type": "string"}, "launcher": {"type": "string"},
            "gpus": {"type": "integer"}, "slots": {"type": "array", "items": {"type": "integer"}},
            "nodes": {"type": "array", "items": {"$ref": "#/components/schemas/Share"}},
            "slurm_job_id": {"type": "integer", "nullable": true},
            "batch_size": {"type": "integer"}, "local_batch_size": {"type": "integer"},
            "restarts": {"type": "integer"}, "failures": {"type": "integer"}, "attempt": {"type": "integer"},
            "step": {"type": "integer", "nullable": true}, "samples_seen": {"type": "integer", "nullable": true},
            "loss": {"type": "number", "nullable": true}, "samples_per_s": {"type": "number", "nullable": true},
            "exit_code": {"type": "integer", "nullable": true}, "message": {"type": "string", "nullable": true},
            "pgid": {"type": "integer", "nullable": true}, "submitted_at": {"type": "number"},
            "started_at": {"type": "number", "nullable": true}, "finished_at": {"type": "number", "nullable": true},
            "log": {"type": "string"}, "command": {"type": "array", "items": {"type": "string"}},
            "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}}},
        "Allocation": {"type": "object", "properties": {"attempt": {"type": "integer"}, "gpus": {"type": "integer"},
            "batch_size": {"type": "integer"}, "local_batch_size": {"type": "integer"}, "slots": {"type": "array", "items": {"type": "integer"}},
            "nodes": {"type": "array", "items": {"$ref": "#/components/schemas/Share"}}}},
        "Share": {"type": "object", "properties": {"node": {"type": "string"}, "gpus": {"type": "integer"}}},
        "MetricsReport": {"type": "object", "required": ["step", "samples_per_s", "batch_size", "world_size", "samples_seen"], "properties": {
            "step": {"type": "integer", "minimum": 0}, "samples_per_s": {"type": "number", "minimum": 0},
            "batch_size": {"type": "integer", "minimum": 1}, "world_size": {"type": "integer", "minimum": 1},
            "loss": {"type": "number", "nullable": true}, "samples_seen": {"type": "integer", "minimum": 0},
            "attempt": {"type": "integer", "minimum": 0, "description": "the launch the report comes from (DLSCALE_ATTEMPT)"}}},
        "CompletionReport": {"type": "object", "required": ["attempt", "step", "samples_seen"], "properties": {
            "attempt": {"type": "integer", "minimum": 0}, "step": {"type": "integer", "minimum": 0},
            "samples_seen": {"type": "integer", "minimum": 0}}},
        "Cluster": {"type": "object", "properties": {
            "executor": {"type": "string", "enum": ["local", "slurm"]},
            "slots": {"type": "array", "items": {"type": "integer"}}, "gpus_detected": {"type": "boolean"},
            "assigned": {"type": "object", "additionalProperties": {"type": "string"}},
            "capacity": {"type": "integer"}, "free": {"type": "integer"},
            "nodes": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
                "gpus": {"type": "integer"}, "total_gpus": {"type": "integer"},
                "jobs": {"type": "object", "additionalProperties": {"type": "integer"}}}}},
            "policy": {"type": "string"}, "utility": {"type": "string"}, "admission": {"type": "string"},
            "jobs": {"type": "object", "additionalProperties": {"type": "integer"}},
            "last_decision": {"type": "object", "nullable": true}}},
        "ProfileUpload": {"type": "object", "required": ["model"], "properties": {
            "model": {"$ref": "#/components/schemas/AnalyticModel"}, "quality": {"type": "object", "nullable": true}}},
        "Profile": {"type": "object", "properties": {"name": {"type": "string"},
            "model": {"$ref": "#/components/schemas/AnalyticModel"}, "quality": {"type": "object", "nullable": true},
            "source": {"type": "string"}, "updated_at": {"type": "number"}}}
    })
}

/// The OpenAPI document.
pub fn document() -> Value {
    let mut paths = serde_json::Map::new();
    for (method, path, secured) in ROUTES {
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        entry[method] = operation(method, path, secured);
    }
    json!({
        "openapi": "3.0.3",
        "info": {"title": "dlscale", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Elastic autoscaler for deep-learning training jobs. State-changing routes need `Authorization: Bearer <DLSCALE_TOKEN>`."},
        "paths": paths,
        "components": {"schemas": schemas(),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_and_every_ref_resolves() {
        let doc = document();
        for (method, path, secured) in ROUTES {
            let op = &doc["paths"][path][method];
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path}"
            );
            assert_eq!(op.get("security").is_some(), secured, "{method} {path}");
        }
        let text = doc.to_string();
        for part in text.split("\"#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "dangling $ref {name}"
            );
        }
    }
}
