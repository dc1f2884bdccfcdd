//! The OpenAPI 3.0 description of the API, served at `GET /v1/openapi.json`: its paths are
//! [`ROUTES`] (the table the router is built from), its security follows each route's
//! [`Access`], and a test checks that each schema lists exactly the fields its type serialises.

use serde_json::{json, Map, Value};

use super::{Access, Route, Verb, ROUTES};

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema}})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": json_content(schema)})
}

fn error(description: &str) -> Value {
    ok(description, schema_ref("Error"))
}

fn array_of(name: &str) -> Value {
    json!({"type": "array", "items": schema_ref(name)})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}})
}

fn text(description: &str, media_type: &str) -> Value {
    json!({"description": description, "content": {media_type: {"schema": {"type": "string"}}}})
}

fn query_param(name: &str, schema: Value, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": schema, "description": description})
}

fn csrf_header() -> Value {
    json!({"name": super::session::CSRF_HEADER, "in": "header", "required": true, "schema": {"type": "string"},
           "description": "any value: shows that this server's own page sent the request"})
}

/// Parameters, request body and responses of one route.
fn details(route: &Route) -> Value {
    let id = path_param("id");
    match (route.verb, route.path) {
        (Verb::Get, "/") => json!({"responses": {"200": text("the dashboard page", "text/html")}}),
        (Verb::Get, "/dashboard.js") => {
            json!({"responses": {"200": text("the dashboard's script", "text/javascript")}})
        }
        (Verb::Get, "/dashboard.css") => {
            json!({"responses": {"200": text("the dashboard's style sheet", "text/css")}})
        }
        (Verb::Get, "/v1/decisions") => json!({
            "parameters": [query_param("limit", json!({"type": "integer", "minimum": 0, "maximum": 50, "default": 20}),
                "at most this many decisions, newest first"),
                query_param("before", json!({"type": "number"}),
                    "only decisions made before this time (seconds since the epoch): the `older` of the page before")],
            "responses": {"200": ok("decisions", schema_ref("Decisions")), "400": error("invalid query")}}),
        (Verb::Get, "/v1/usage") => json!({
            "parameters": [query_param("since", json!({"type": "number"}),
                "from this time (seconds since the epoch; default: from the start)"),
                query_param("by", json!({"type": "string", "enum": ["team", "user", "job"], "default": "team"}),
                    "what the GPU-seconds are summed by")],
            "responses": {"200": ok("GPU-seconds, most first", json!({"type": "array", "items": schema_ref("UsageRow")})),
                "400": error("invalid query")}}),
        (Verb::Get, "/v1/teams") => {
            json!({"responses": {"200": ok("each team, in the configuration's order (none without teams)",
            json!({"type": "array", "items": schema_ref("Team")}))}})
        }
        (Verb::Get, "/v1/jobs/{id}/explain") => json!({"parameters": [id],
            "responses": {"200": ok("the explanation", schema_ref("Explain")), "404": error("unknown job")}}),
        (Verb::Get, "/healthz") => json!({"responses": {"200": ok("alive",
            json!({"type": "object", "properties": {"status": {"type": "string", "enum": ["ok", "degraded"]},
                "storage_error": {"type": "string"}}}))}}),
        (Verb::Get, "/metrics") => json!({"responses": {"200": {"description": "OpenMetrics text",
            "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}}}),
        (Verb::Get, "/v1/openapi.json") => {
            json!({"responses": {"200": ok("OpenAPI 3 document", json!({"type": "object"}))}})
        }
        (Verb::Get, "/v1/cluster") => {
            json!({"responses": {"200": ok("cluster", schema_ref("Cluster"))}})
        }
        (Verb::Get, "/v1/jobs") => json!({
            "parameters": [
                query_param("all", json!({"type": "boolean", "default": false}), "every job, ended ones included, newest first"),
                query_param("ended", json!({"type": "boolean", "default": false}), "only the ended jobs, newest first"),
                query_param("limit", json!({"type": "integer", "minimum": 0, "default": 1000}), "with all or ended: at most this many"),
                query_param("before", json!({"type": "integer", "minimum": 0}),
                    "with all or ended: only jobs that arrived before this one, the X-Next-Before of the page before")],
            "responses": {"200": {"description": "jobs; with all or ended, the header X-Next-Before when older jobs follow",
                "headers": {"X-Next-Before": {"schema": {"type": "integer"}}},
                "content": json_content(array_of("Job"))},
                "400": error("invalid query")}}),
        (Verb::Post, "/v1/session") => json!({
            "requestBody": {"required": true, "content": json_content(object(&["token"], json!({"token": {"type": "string",
                "description": "the server's admin token"}})))},
            "parameters": [csrf_header()],
            "responses": {"201": {"description": "logged in: Set-Cookie dlscale_session_PORT (HttpOnly, SameSite=Strict, Path=/v1)",
                "content": json_content(schema_ref("Session"))},
                "400": error("invalid body"), "401": error("not the admin token"),
                "403": error("no X-Dlscale-Csrf header, or another origin")}}),
        (Verb::Delete, "/v1/session") => json!({
            "parameters": [csrf_header()],
            "responses": {"200": ok("logged out; the cookie is deleted", schema_ref("Session")),
                "403": error("no X-Dlscale-Csrf header, or another origin")}}),
        (Verb::Post, "/v1/jobs") => json!({
            "requestBody": {"required": true, "content": json_content(json!({"oneOf": [
                schema_ref("JobSubmission"), array_of("JobSubmission")]}))},
            "responses": {
                "201": ok("accepted: the job, or the jobs of an array", json!({"oneOf": [schema_ref("Job"), array_of("Job")]})),
                "400": error("invalid submission; `field` names the field (`[k].field` in an array)"),
                "409": error("a live job with this id exists"),
                "413": {"description": "body larger than 1 MiB"},
                "503": error("the database cannot be written now")}}),
        (Verb::Get, "/v1/jobs/{id}") => json!({"parameters": [id],
            "responses": {"200": ok("job", schema_ref("Job")), "404": error("unknown job")}}),
        (Verb::Delete, "/v1/jobs/{id}") => json!({"parameters": [id],
            "responses": {"202": ok("cancelling or cancelled", schema_ref("Job")),
                "404": error("unknown job"), "409": error("the job already ended"),
                "503": error("the database cannot be written now")}}),
        (Verb::Get, "/v1/jobs/{id}/logs") => json!({"parameters": [id,
                query_param("tail_bytes", json!({"type": "integer", "minimum": 0, "default": 65536}), "the last this many bytes"),
                query_param("from", json!({"type": "integer", "minimum": 0}), "from this byte offset (at most 1 MiB)")],
            "responses": {"200": {"description": "log text; header X-Log-Offset: the offset after it",
                "headers": {"X-Log-Offset": {"schema": {"type": "integer"}}},
                "content": {"text/plain": {"schema": {"type": "string"}}}},
                "404": error("unknown job")}}),
        (Verb::Get, "/v1/jobs/{id}/allocations") => json!({"parameters": [id],
            "responses": {"200": ok("one per launch", array_of("Allocation")), "404": error("unknown job")}}),
        (Verb::Post, "/v1/jobs/{id}/metrics") => json!({"parameters": [id],
            "requestBody": {"required": true, "content": json_content(schema_ref("MetricsReport"))},
            "responses": {"202": ok("recorded (accepted: false for a report of an older launch)", schema_ref("ReportAnswer")),
                "400": error("invalid report"), "404": error("unknown job"), "409": error("the job has ended"),
                "503": error("the database cannot be written now")}}),
        (Verb::Post, "/v1/jobs/{id}/complete") => json!({"parameters": [id],
            "requestBody": {"required": true, "content": json_content(schema_ref("CompletionReport"))},
            "responses": {"202": ok("recorded", schema_ref("ReportAnswer")), "400": error("invalid report"),
                "404": error("unknown job"), "409": error("the job is not running that launch"),
                "503": error("the database cannot be written now")}}),
        (Verb::Get, "/v1/profiles") => {
            json!({"responses": {"200": ok("profiles", array_of("Profile"))}})
        }
        (Verb::Put, "/v1/profiles/{name}") => json!({"parameters": [path_param("name")],
            "requestBody": {"required": true, "content": json_content(schema_ref("ProfileUpload"))},
            "responses": {"200": ok("stored", schema_ref("Profile")), "400": error("invalid model"),
                "503": error("the database cannot be written now")}}),
        _ => json!({"responses": {}}),
    }
}

fn operation(route: &Route) -> Value {
    let mut op = details(route);
    op["summary"] = json!(route.summary);
    if let Some(who) = route.access.who() {
        op["security"] = if route.access == Access::Metrics {
            json!([{"bearer": []}])
        } else {
            json!([{"bearer": []}, {"session": []}])
        };
        op["description"] = json!(format!(
            "Needs {who}. The dashboard's session cookie stands for the admin token; a request it \
             authenticates that is not a GET must carry the header X-Dlscale-Csrf and come from \
             this server's origin."
        ));
        op["responses"]["401"] = error("missing or wrong bearer token");
        if route.access != Access::Metrics {
            op["responses"]["403"] = error(
                "a token this route does not serve: a job's token elsewhere than its job, a \
                 user's where the admin's is needed, or a user changing another team's job",
            );
        }
    }
    op
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

fn nullable(mut schema: Value) -> Value {
    schema["nullable"] = json!(true);
    schema
}

/// Every schema, by name.
pub fn schemas() -> Value {
    let int = json!({"type": "integer", "minimum": 0});
    let num = json!({"type": "number"});
    let string = json!({"type": "string"});
    let ints = json!({"type": "array", "items": {"type": "integer"}});
    let shares = array_of("Share");
    let states = json!({"type": "string", "enum": dlscale_autoscaler::Status::ALL.iter().map(|s| s.name()).collect::<Vec<_>>()});
    json!({
        "Error": object(&["error"], json!({"error": string, "field": {"type": "string", "description": "the request field at fault"}})),
        "AnalyticModel": object(&["compute_base_s", "compute_per_sample_s"], json!({
            "compute_base_s": {"type": "number", "minimum": 0}, "compute_per_sample_s": {"type": "number", "minimum": 0},
            "sync_intra_base_s": {"type": "number", "minimum": 0}, "sync_intra_per_gpu_s": {"type": "number", "minimum": 0},
            "sync_inter_base_s": {"type": "number", "minimum": 0}, "sync_inter_per_gpu_s": {"type": "number", "minimum": 0},
            "overlap_gamma": {"type": "number", "minimum": 1, "default": 1,
                "description": "overlap of compute and all-reduce: step = (compute^γ + sync^γ)^(1/γ)"},
            "max_local_batch": nullable(json!({"type": "integer", "minimum": 1}))})),
        "FitQuality": {"type": "object", "description": "how well a fitted model matches its measurements"},
        "JobSubmission": {"type": "object", "required": ["id", "min_batch", "max_batch", "command", "workdir"],
            "description": "The fields of a job-file entry plus how to run the job. Without `model` the job uses `profile`, or a model learned from its own metrics.",
            "properties": {
                "id": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"},
                "model": {"oneOf": [{"type": "string", "description": "bundled profile name"}, schema_ref("AnalyticModel")]},
                "profile": {"type": "string", "description": "stored profile to use when `model` is absent"},
                "family": {"type": "string", "description": "model family of a learned job (no `model`, no `profile`): it starts from, and adds to, what the family's jobs measured"},
                "min_batch": {"type": "integer", "minimum": 1}, "max_batch": {"type": "integer", "minimum": 1},
                "max_local_batch": {"type": "integer", "minimum": 1},
                "max_accum_steps": {"type": "integer", "minimum": 1, "default": 1, "description": "most micro-steps per step (gradient accumulation beyond max_local_batch)"},
                "min_local_batch": {"type": "integer", "minimum": 1, "default": 1}, "min_gpus": {"type": "integer", "minimum": 1, "default": 1},
                "max_gpus": {"type": "integer", "minimum": 1}, "powers_of_two": {"type": "boolean", "default": false},
                "batch_size": {"type": "integer"}, "gpus": {"type": "integer"},
                "work_samples": num, "epochs": num, "dataset_samples": num,
                "steps": {"type": "integer", "minimum": 1, "description": "length in steps at `batch_size` (required with it): the work is steps × batch_size samples"},
                "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6, "default": 1}, "epoch": {"type": "integer", "default": 0},
                "attained_gpu_s": {"type": "number", "minimum": 0, "default": 0},
                "team": {"type": "string", "description": "the team whose quota it shares (one of the server's `[teams]`; default: the default team)"},
                "types": {"type": "object", "description": "the GPU types it may run on (default: every type of the cluster), each with its model there (default: a bundled model's table on that type, else the job's `model`) and its largest per-GPU batch there; a type name has lower-case letters, digits, '-', '_', '.'",
                    "additionalProperties": {"type": "object", "properties": {
                        "model": {"oneOf": [{"type": "string", "description": "bundled profile name"}, schema_ref("AnalyticModel")]},
                        "max_local_batch": {"type": "integer", "minimum": 1}}}},
                "command": {"type": "array", "minItems": 1, "items": string},
                "workdir": {"type": "string", "description": "absolute directory"},
                "launcher": {"type": "string", "enum": ["torchrun", "plain", "srun"], "default": "torchrun"},
                "env": {"type": "object", "additionalProperties": string},
                "max_retries": int,
                "resume_from": {"type": "string", "description": "an ended job's id: this job starts from a copy of that job's last checkpoints (without it a job starts from nothing, whatever ran under its id before)"},
                "batch_in_place": {"type": "boolean", "default": false, "description": "its workers take a new batch while they run (the worker library's `job.rebatched()`): a batch change on the same GPUs is answered to its metrics reports, not a restart"}}},
        "Event": object(&["at", "kind", "detail"], json!({"at": num, "kind": string, "detail": string})),
        "Share": object(&["node", "gpus"], json!({"node": string, "gpus": int})),
        "EngineId": object(&["kind", "id"], json!({
            "kind": {"type": "string", "description": "what the executor calls the id: pgid (local), slurm_job_id (Slurm)"},
            "id": {"type": "string", "description": "the id, as text"}})),
        "Job": object(&["id", "state"], json!({
            "id": string, "state": states, "model": string, "launcher": string,
            "gpus": int, "slots": ints, "nodes": shares,
            "gpu_type": {"type": "string", "description": "the GPU type of the nodes its launch holds; absent where they name none"},
            "batch_size": int, "local_batch_size": int,
            "pending_batch_size": nullable(int.clone()), "pending_since": nullable(num.clone()),
            "uid": string, "resume_from": nullable(string.clone()),
            "restarts": int, "failures": int, "attempt": int,
            "step": nullable(int.clone()), "samples_seen": nullable(int.clone()),
            "loss": nullable(num.clone()), "samples_per_s": nullable(num.clone()),
            "predicted_samples_per_s": nullable(num.clone()), "efficiency": nullable(num.clone()),
            "noise_scale": nullable(num.clone()),
            "family": nullable(string.clone()),
            "team": nullable(string.clone()), "owner": nullable(string.clone()),
            "exit_code": nullable(json!({"type": "integer"})), "message": string,
            "waiting": nullable(string.clone()),
            "waiting_until": nullable(json!({"type": "number", "description": "until when it waits at the latest, seconds since the epoch"})),
            "engine_id": nullable(schema_ref("EngineId")),
            "submitted_at": num, "started_at": nullable(num.clone()), "finished_at": nullable(num.clone()),
            "log": string, "command": {"type": "array", "items": string},
            "events": array_of("Event")})),
        "Allocation": object(&["attempt", "gpus"], json!({"attempt": int, "at": num,
            "ended_at": nullable(num.clone()), "gpus": int,
            "batch_size": int, "local_batch_size": int, "nodes": shares})),
        "Node": object(&["name", "gpus"], json!({"name": string, "gpus": int, "total_gpus": int,
            "gpu_type": {"type": "string", "description": "its GPU type (typed GRES); absent where the cluster names none"},
            "jobs": {"type": "object", "additionalProperties": {"type": "integer"}}})),
        "DecidedJob": object(&["id", "state"], json!({"id": string,
            "state": {"type": "string", "enum": ["running", "queued", "dropped"]},
            "gpus": int, "batch_size": int, "nodes": shares, "predicted_samples_per_s": num,
            "gpu_type": {"type": "string", "description": "the GPU type it was decided onto; absent where the policy sees the GPUs alike"}})),
        "Decision": object(&["at", "trigger"], json!({"at": num, "trigger": string, "capacity": int,
            "objective": num, "jobs": array_of("DecidedJob")})),
        "DecisionJob": object(&["id", "state"], json!({"id": string,
            "state": {"type": "string", "enum": ["running", "queued", "dropped"]},
            "gpus": int, "batch_size": int, "predicted_samples_per_s": num,
            "gpu_type": {"type": "string", "description": "the GPU type it was decided onto; absent where the policy sees the GPUs alike"},
            "held": nullable(json!({"type": "array", "items": int, "minItems": 2, "maxItems": 2,
                "description": "what it ran with when decided: [GPUs, global batch]"}))})),
        "DecisionEntry": object(&["at", "trigger", "changes"], json!({"at": num, "trigger": string,
            "capacity": int, "gpus": int, "objective": num,
            "changes": {"type": "array", "items": string, "description": "what it changed, in plain words"},
            "unchanged_after": {"type": "integer", "minimum": 0, "description": "decisions after it that changed nothing"},
            "until": {"type": "number", "description": "when the last of those was made"},
            "jobs": array_of("DecisionJob")})),
        "Decisions": object(&["decisions", "explanations"], json!({"decisions": array_of("DecisionEntry"),
            "older": nullable(json!({"type": "number", "description": "when older decisions are kept: the `before` that asks for them"})),
            "explanations": array_of("Explain")})),
        "Session": object(&["open"], json!({"open": {"type": "boolean"},
            "expires_at": nullable(json!({"type": "number", "description": "when the session ends, seconds since the epoch"}))})),
        "Explain": object(&["id", "summary"], json!({"id": string, "decided_at": nullable(num.clone()),
            "summary": {"type": "string", "description": "in plain words"},
            "explanation": nullable(schema_ref("Explanation"))})),
        "Explanation": object(&["id", "at_s", "limit"], json!({"id": string, "at_s": num,
            "state": nullable(json!({"type": "string", "enum": ["running", "queued", "dropped"]})),
            "gpus": int, "batch_size": int, "value": nullable(num.clone()), "free_gpus": int,
            "more": nullable(schema_ref("Alternative")), "fewer": nullable(schema_ref("Alternative")),
            "donor": nullable(schema_ref("Donor")), "limit": schema_ref("Limit"),
            "types": schema_ref("TypeChoice")})),
        "TypeChoice": object(&["others"], json!({
            "gpu_type": nullable(json!({"type": "string", "description": "the type it runs on"})),
            "only_on": {"type": "array", "items": string, "description": "the types it may run on, when fewer than the cluster's; absent otherwise"},
            "progress_samples_per_s": nullable(json!({"type": "number", "description": "its goodput where it runs for goodput utilities, else its throughput"})),
            "others": array_of("OnOtherType")})),
        "OnOtherType": object(&["gpu_type", "best", "reason"], json!({"gpu_type": string,
            "best": schema_ref("TypeOption"), "within_free": nullable(schema_ref("TypeOption")),
            "free_gpus": int,
            "reason": {"type": "object", "required": ["reason"],
                "description": "why it does not run there; `min_gain` and `cost_s` with move-cost, `policy` with policy",
                "properties": {"reason": {"type": "string", "enum": ["held", "no-faster", "move-cost", "taken", "policy"]},
                    "min_gain": num, "cost_s": num, "policy": string}}})),
        "TypeOption": object(&["gpus", "value_change"], json!({"gpus": int, "batch_size": int,
            "samples_per_s": num, "progress_samples_per_s": num, "value_change": num})),
        "Alternative": object(&["gpus", "value_change"], json!({"gpus": int, "batch_size": int,
            "samples_per_s": num, "gain": nullable(json!({"type": "number", "description": "relative change of the job's metric: 0.03 is 3 % more"})),
            "value_change": num})),
        "Donor": object(&["id", "gpus", "to_gpus"], json!({"id": string, "gpus": int, "to_gpus": int,
            "value_change": num})),
        "Limit": {"type": "object", "required": ["limit"],
            "description": "what keeps the job from more GPUs (or from starting); the fields besides `limit` depend on it",
            "properties": {
                "limit": {"type": "string", "enum": ["largest", "cooldown", "finishing", "until-periodic", "shape", "room",
                    "exploring", "no-gain", "min-gain", "restart-cost", "capacity", "admission", "fifo", "team-max",
                    "guarantees", "dropped",
                    "unrunnable", "leaving", "policy"]},
                "until_s": num, "next_s": num, "min_gain": num, "cost_s": num, "rule": string,
                "need": int, "free": int, "policy": string,
                "measured": nullable(int.clone()), "cap": int, "team": string, "max": int}},
        "Policy": object(&["name", "about"], json!({"name": string, "about": string})),
        "Cluster": object(&["executor", "capacity"], json!({
            "executor": {"type": "string", "enum": crate::executor::names()},
            "slots": ints, "gpus_detected": {"type": "boolean"},
            "assigned": {"type": "object", "additionalProperties": string},
            "capacity": int, "free": int, "nodes": array_of("Node"),
            "policy": string, "policies": array_of("Policy"), "utility": string, "admission": string,
            "jobs": {"type": "object", "additionalProperties": {"type": "integer"}},
            "last_decision": nullable(schema_ref("Decision")),
            "storage_error": nullable(string.clone())})),
        "GradNoise": object(&["grad_sqr", "grad_var"], json!({"grad_sqr": {"type": "number", "minimum": 0},
            "grad_var": {"type": "number", "minimum": 0}})),
        "MetricsReport": object(&["step", "samples_per_s", "batch_size", "world_size", "samples_seen"], json!({
            "step": int, "samples_per_s": {"type": "number", "minimum": 0},
            "batch_size": {"type": "integer", "minimum": 1}, "world_size": {"type": "integer", "minimum": 1},
            "loss": nullable(num.clone()), "samples_seen": int,
            "attempt": {"type": "integer", "minimum": 0, "description": "the launch the report comes from (DLSCALE_ATTEMPT)"},
            "grad": nullable(schema_ref("GradNoise")),
            "compute_time_s": nullable(json!({"type": "number", "exclusiveMinimum": 0,
                "description": "seconds of one micro-step's compute alone, without the all-reduce"})),
            "max_local_batch": nullable(json!({"type": "integer", "minimum": 1,
                "description": "samples per GPU one micro-step holds, as the worker measured them: the job's memory limit from then on (on a fleet, on the GPU type the launch runs on)"})),
            "micro_steps": nullable(json!({"type": "integer", "minimum": 1,
                "description": "micro-steps each step ran its per-GPU batch in, when the worker sizes its own accumulation: what the step time measures and how the launch runs"}))})),
        "CompletionReport": object(&["attempt", "step", "samples_seen"], json!({
            "attempt": int, "step": int, "samples_seen": int})),
        "ReportAnswer": object(&["accepted"], json!({"accepted": {"type": "boolean"}, "reason": string,
            "batch": object(&["batch_size", "local_batch_size", "micro_steps"], json!({
                "batch_size": {"type": "integer", "minimum": 1},
                "local_batch_size": {"type": "integer", "minimum": 1},
                "micro_steps": {"type": "integer", "minimum": 1}}))})),
        "ProfileUpload": object(&["model"], json!({"model": schema_ref("AnalyticModel"),
            "quality": nullable(schema_ref("FitQuality"))})),
        "UsageRow": object(&["key", "gpu_seconds", "launches"], json!({"key": {"type": "string",
            "description": "the team (`default`: jobs of no team), user (`admin`: the admin's jobs) or job"},
            "submission": {"type": "integer", "minimum": 0, "description":
                "by job: which submission of the id (its arrival number; a reused id has a row per submission)"},
            "gpu_seconds": num, "launches": int})),
        "Team": object(&["team", "guaranteed_gpus", "gpus", "borrowed_gpus", "lent_gpus", "jobs_waiting"], json!({
            "team": {"type": "string", "description": "its name (`default`: jobs of no team)"},
            "guaranteed_gpus": int, "max_gpus": {"type": ["integer", "null"], "description": "null: no limit"},
            "gpus": int, "borrowed_gpus": int, "lent_gpus": int, "jobs_waiting": int,
            "fair_share": {"type": ["number", "null"],
                "description": "the factor on its jobs' values: 1 when it used nothing lately, 0.5 at its share; null: fair share off"},
            "decayed_gpu_hours": {"type": ["number", "null"], "description": "its GPU-hours with fair share's decay"}})),
        "Profile": object(&["name", "model"], json!({"name": string, "model": schema_ref("AnalyticModel"),
            "quality": nullable(schema_ref("FitQuality")), "source": string, "updated_at": num}))
    })
}

/// The OpenAPI document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.verb.name()] = operation(route);
    }
    json!({
        "openapi": "3.0.3",
        "info": {"title": "dlscale", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Elastic autoscaler for deep-learning training jobs. Every /v1 route needs `Authorization: Bearer <token>` (or the dashboard's session cookie from POST /v1/session, which takes the admin token in its body)."},
        "paths": paths,
        "components": {"schemas": schemas(),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                           "session": {"type": "apiKey", "in": "cookie", "name": "dlscale_session_PORT",
                               "description": "set by POST /v1/session; PORT is the port the browser addressed"}}}
    })
}
