//! Protobuf request bodies for the built-in kinds kubectl's generator commands create:
//! `kubectl create namespace|configmap|secret generic|serviceaccount|deployment|job`.
//!
//! A body is the `k8s\0` magic followed by a `runtime.Unknown` envelope (typeMeta, raw, contentEncoding,
//! contentType) whose `raw` is the object's protobuf encoding. The object is decoded with the `k8s-pb` crate
//! (0.9.0, generated from the Kubernetes 1.35 `.proto` files; prost) and rewritten into the JSON shape of
//! k8s-openapi / the real API server, after which the normal JSON pipeline runs.
//!
//! Fidelity rule: nothing is dropped silently. Every decoded message has the fields this module converts
//! taken out of it, and whatever remains must equal the message's default; a body that sets anything else
//! is answered with 415 naming the unconverted message and the JSON workaround, as for unknown kinds.
//!
//! Go marshals non-pointer fields even when empty (proto2 "non-nullable"), so those arrive as `Some("")`,
//! `Some(0)` or `Some(false)`; the JSON encoding omits them (`omitempty`). Pointer fields arrive only when
//! set and keep their zero values (`replicas: 0`). Hence the two flavours of helper below.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// The magic prefix of a Kubernetes protobuf body.
pub(crate) const MAGIC: &[u8] = b"k8s\0";

const WORKAROUND: &str = "use `kubectl create ... --dry-run=client -o yaml | kubectl apply -f -` instead, which sends JSON";

fn unsupported(what: &str) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the kube-emulator does not decode protobuf request bodies for {what} (it decodes Namespace, ConfigMap, Secret, ServiceAccount, apps/v1 Deployment and batch/v1 Job as kubectl's generator commands send them); {WORKAROUND}"
        ),
    )
}

/// Decodes a protobuf request body into the object's JSON form.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        return Err(ApiError::bad_request(
            "protobuf body does not start with the k8s\\0 prefix",
        ));
    };
    let unknown = Unknown::decode(rest)
        .map_err(|e| ApiError::bad_request(format!("invalid protobuf envelope: {e}")))?;
    let tm = unknown.type_meta.unwrap_or_default();
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(unsupported("a content-encoded envelope"));
    }
    if unknown
        .content_type
        .as_deref()
        .is_some_and(|t| !t.is_empty() && t != "application/vnd.kubernetes.protobuf")
    {
        return Err(unsupported("an envelope whose raw object is not protobuf"));
    }
    let raw = unknown.raw.unwrap_or_default();
    let bad = |e: prost::DecodeError| {
        ApiError::bad_request(format!("invalid protobuf {api_version} {kind}: {e}"))
    };
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => namespace(core::Namespace::decode(&raw[..]).map_err(bad)?)?,
        ("v1", "ConfigMap") => config_map(core::ConfigMap::decode(&raw[..]).map_err(bad)?)?,
        ("v1", "Secret") => secret(core::Secret::decode(&raw[..]).map_err(bad)?)?,
        ("v1", "ServiceAccount") => {
            service_account(core::ServiceAccount::decode(&raw[..]).map_err(bad)?)?
        }
        ("apps/v1", "Deployment") => deployment(apps::Deployment::decode(&raw[..]).map_err(bad)?)?,
        ("batch/v1", "Job") => job(batch::Job::decode(&raw[..]).map_err(bad)?)?,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => self_subject_access_review(
            authz::SelfSubjectAccessReview::decode(&raw[..]).map_err(bad)?,
        )?,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => self_subject_rules_review(
            authz::SelfSubjectRulesReview::decode(&raw[..]).map_err(bad)?,
        )?,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            self_subject_review(authn::SelfSubjectReview::decode(&raw[..]).map_err(bad)?)?
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            token_request(authn::TokenRequest::decode(&raw[..]).map_err(bad)?)?
        }
        _ => return Err(unsupported(&format!("{api_version} {kind}"))),
    };
    let m = obj.as_object_mut().expect("object");
    m.insert("apiVersion".into(), json!(api_version));
    m.insert("kind".into(), json!(kind));
    Ok(obj)
}

/// A JSON object under construction.
#[derive(Default)]
struct Obj(Map<String, Value>);

impl Obj {
    /// A string field with `omitempty`.
    fn s(&mut self, k: &str, v: Option<String>) -> &mut Self {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            self.0.insert(k.into(), json!(v));
        }
        self
    }
    /// A required string field (always present).
    fn req(&mut self, k: &str, v: Option<String>) -> &mut Self {
        self.0.insert(k.into(), json!(v.unwrap_or_default()));
        self
    }
    /// A pointer field: kept when set, even to its zero value.
    fn ptr<T: Into<Value>>(&mut self, k: &str, v: Option<T>) -> &mut Self {
        if let Some(v) = v {
            self.0.insert(k.into(), v.into());
        }
        self
    }
    /// A non-pointer number with `omitempty`.
    fn n0<T: Into<i64>>(&mut self, k: &str, v: Option<T>) -> &mut Self {
        if let Some(v) = v.map(Into::into).filter(|v| *v != 0) {
            self.0.insert(k.into(), json!(v));
        }
        self
    }
    /// A non-pointer bool with `omitempty`.
    fn b0(&mut self, k: &str, v: Option<bool>) -> &mut Self {
        if v == Some(true) {
            self.0.insert(k.into(), json!(true));
        }
        self
    }
    /// A string map with `omitempty`.
    fn map(&mut self, k: &str, v: BTreeMap<String, String>) -> &mut Self {
        if !v.is_empty() {
            self.0.insert(k.into(), json!(v));
        }
        self
    }
    /// A list with `omitempty`.
    fn list(&mut self, k: &str, v: Vec<Value>) -> &mut Self {
        if !v.is_empty() {
            self.0.insert(k.into(), Value::Array(v));
        }
        self
    }
    /// A nested value, when present.
    fn val(&mut self, k: &str, v: Option<Value>) -> &mut Self {
        if let Some(v) = v {
            self.0.insert(k.into(), v);
        }
        self
    }
    fn done(&mut self) -> Value {
        Value::Object(std::mem::take(&mut self.0))
    }
}

/// Fails unless everything not converted was left at its default.
fn rest<T: Default + PartialEq>(rest: T, what: &str) -> Result<(), ApiError> {
    if rest == T::default() {
        Ok(())
    } else {
        Err(unsupported(&format!(
            "{what} fields this decoder does not convert"
        )))
    }
}

fn strings(v: Vec<String>) -> Vec<Value> {
    v.into_iter().map(Value::String).collect()
}

fn time(t: Option<meta::Time>) -> Option<Value> {
    let t = t?;
    let secs = t.seconds.unwrap_or(0);
    // Go's zero time.Time is encoded as an empty message (metav1.Time.Marshal); its JSON form is `null`,
    // as in the `template.metadata.creationTimestamp: null` that kubectl's JSON carries too.
    if (secs == 0 && t.nanos.unwrap_or(0) == 0) || secs == -62_135_596_800 {
        return Some(Value::Null);
    }
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|d| json!(d.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn int_or_string(v: Option<IntOrString>) -> Option<Value> {
    let v = v?;
    Some(match v.r#type {
        Some(1) => json!(v.str_val.unwrap_or_default()),
        _ => json!(v.int_val.unwrap_or(0)),
    })
}

fn object_meta(m: Option<meta::ObjectMeta>) -> Result<Value, ApiError> {
    let mut m = m.unwrap_or_default();
    let mut o = Obj::default();
    o.s("name", m.name.take())
        .s("generateName", m.generate_name.take())
        .s("namespace", m.namespace.take())
        .s("selfLink", m.self_link.take())
        .s("uid", m.uid.take())
        .s("resourceVersion", m.resource_version.take())
        .n0("generation", m.generation.take())
        .val("creationTimestamp", time(m.creation_timestamp.take()))
        .val("deletionTimestamp", time(m.deletion_timestamp.take()))
        .ptr(
            "deletionGracePeriodSeconds",
            m.deletion_grace_period_seconds.take(),
        )
        .map("labels", std::mem::take(&mut m.labels))
        .map("annotations", std::mem::take(&mut m.annotations))
        .list("finalizers", strings(std::mem::take(&mut m.finalizers)));
    let mut owners = Vec::new();
    for mut r in std::mem::take(&mut m.owner_references) {
        let mut ro = Obj::default();
        ro.req("apiVersion", r.api_version.take())
            .req("kind", r.kind.take())
            .req("name", r.name.take())
            .req("uid", r.uid.take())
            .ptr("controller", r.controller.take())
            .ptr("blockOwnerDeletion", r.block_owner_deletion.take());
        rest(r, "OwnerReference")?;
        owners.push(ro.done());
    }
    o.list("ownerReferences", owners);
    rest(m, "ObjectMeta")?;
    Ok(o.done())
}

fn label_selector(s: Option<meta::LabelSelector>) -> Result<Option<Value>, ApiError> {
    let Some(mut s) = s else {
        return Ok(None);
    };
    let mut o = Obj::default();
    o.map("matchLabels", std::mem::take(&mut s.match_labels));
    let mut exprs = Vec::new();
    for mut e in std::mem::take(&mut s.match_expressions) {
        let mut eo = Obj::default();
        eo.req("key", e.key.take())
            .req("operator", e.operator.take())
            .list("values", strings(std::mem::take(&mut e.values)));
        rest(e, "LabelSelectorRequirement")?;
        exprs.push(eo.done());
    }
    o.list("matchExpressions", exprs);
    rest(s, "LabelSelector")?;
    Ok(Some(o.done()))
}

fn quantities(
    m: BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>,
) -> BTreeMap<String, String> {
    m.into_iter()
        .map(|(k, q)| (k, q.string.unwrap_or_default()))
        .collect()
}

fn container(mut c: core::Container) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.req("name", c.name.take())
        .s("image", c.image.take())
        .list("command", strings(std::mem::take(&mut c.command)))
        .list("args", strings(std::mem::take(&mut c.args)))
        .s("workingDir", c.working_dir.take());
    let mut ports = Vec::new();
    for mut p in std::mem::take(&mut c.ports) {
        let mut po = Obj::default();
        po.s("name", p.name.take())
            .n0("hostPort", p.host_port.take())
            .ptr("containerPort", Some(p.container_port.take().unwrap_or(0)))
            .s("protocol", p.protocol.take())
            .s("hostIP", p.host_ip.take());
        rest(p, "ContainerPort")?;
        ports.push(po.done());
    }
    o.list("ports", ports);
    let mut env = Vec::new();
    for mut e in std::mem::take(&mut c.env) {
        let mut eo = Obj::default();
        eo.req("name", e.name.take()).s("value", e.value.take());
        rest(e, "EnvVar")?;
        env.push(eo.done());
    }
    o.list("env", env);
    // `resources` is a non-pointer struct in Go: the JSON always carries it, `{}` when empty.
    let mut r = c.resources.take().unwrap_or_default();
    let mut ro = Obj::default();
    ro.map("limits", quantities(std::mem::take(&mut r.limits)))
        .map("requests", quantities(std::mem::take(&mut r.requests)));
    rest(r, "ResourceRequirements")?;
    o.val("resources", Some(ro.done()));
    let mut mounts = Vec::new();
    for mut v in std::mem::take(&mut c.volume_mounts) {
        let mut vo = Obj::default();
        vo.req("name", v.name.take())
            .b0("readOnly", v.read_only.take())
            .ptr("recursiveReadOnly", v.recursive_read_only.take())
            .req("mountPath", v.mount_path.take())
            .s("subPath", v.sub_path.take())
            .ptr("mountPropagation", v.mount_propagation.take())
            .s("subPathExpr", v.sub_path_expr.take());
        rest(v, "VolumeMount")?;
        mounts.push(vo.done());
    }
    o.list("volumeMounts", mounts)
        .s("terminationMessagePath", c.termination_message_path.take())
        .s(
            "terminationMessagePolicy",
            c.termination_message_policy.take(),
        )
        .s("imagePullPolicy", c.image_pull_policy.take())
        .b0("stdin", c.stdin.take())
        .b0("stdinOnce", c.stdin_once.take())
        .b0("tty", c.tty.take());
    rest(c, "Container")?;
    Ok(o.done())
}

fn local_refs(v: Vec<core::LocalObjectReference>) -> Vec<Value> {
    v.into_iter()
        .map(|r| {
            let mut o = Obj::default();
            o.s("name", r.name);
            o.done()
        })
        .collect()
}

fn pod_spec(s: Option<core::PodSpec>) -> Result<Value, ApiError> {
    let mut s = s.unwrap_or_default();
    let mut o = Obj::default();
    let init = std::mem::take(&mut s.init_containers)
        .into_iter()
        .map(container)
        .collect::<Result<Vec<_>, _>>()?;
    let containers = std::mem::take(&mut s.containers)
        .into_iter()
        .map(container)
        .collect::<Result<Vec<_>, _>>()?;
    o.list("initContainers", init);
    // `containers` has no omitempty.
    o.val("containers", Some(Value::Array(containers)))
        .s("restartPolicy", s.restart_policy.take())
        .ptr(
            "terminationGracePeriodSeconds",
            s.termination_grace_period_seconds.take(),
        )
        .ptr("activeDeadlineSeconds", s.active_deadline_seconds.take())
        .s("dnsPolicy", s.dns_policy.take())
        .map("nodeSelector", std::mem::take(&mut s.node_selector))
        .s("serviceAccountName", s.service_account_name.take())
        .s("serviceAccount", s.service_account.take())
        .ptr(
            "automountServiceAccountToken",
            s.automount_service_account_token.take(),
        )
        .s("nodeName", s.node_name.take())
        .b0("hostNetwork", s.host_network.take())
        .b0("hostPID", s.host_pid.take())
        .b0("hostIPC", s.host_ipc.take())
        .ptr("shareProcessNamespace", s.share_process_namespace.take())
        .list(
            "imagePullSecrets",
            local_refs(std::mem::take(&mut s.image_pull_secrets)),
        )
        .s("hostname", s.hostname.take())
        .s("subdomain", s.subdomain.take())
        .s("schedulerName", s.scheduler_name.take())
        .s("priorityClassName", s.priority_class_name.take())
        .ptr("priority", s.priority.take())
        .ptr("runtimeClassName", s.runtime_class_name.take())
        .ptr("enableServiceLinks", s.enable_service_links.take())
        .ptr("preemptionPolicy", s.preemption_policy.take())
        .ptr("setHostnameAsFQDN", s.set_hostname_as_fqdn.take())
        .ptr("hostUsers", s.host_users.take())
        .ptr("hostnameOverride", s.hostname_override.take());
    rest(s, "PodSpec")?;
    Ok(o.done())
}

fn pod_template(t: Option<core::PodTemplateSpec>) -> Result<Value, ApiError> {
    let mut t = t.unwrap_or_default();
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(t.metadata.take())?))
        .val("spec", Some(pod_spec(t.spec.take())?));
    rest(t, "PodTemplateSpec")?;
    Ok(o.done())
}

fn namespace(mut n: core::Namespace) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(n.metadata.take())?));
    let mut spec = n.spec.take().unwrap_or_default();
    let mut so = Obj::default();
    so.list("finalizers", strings(std::mem::take(&mut spec.finalizers)));
    rest(spec, "NamespaceSpec")?;
    o.val("spec", Some(so.done()));
    let mut status = n.status.take().unwrap_or_default();
    let mut st = Obj::default();
    st.s("phase", status.phase.take());
    rest(status, "NamespaceStatus")?;
    o.val("status", Some(st.done()));
    rest(n, "Namespace")?;
    Ok(o.done())
}

fn config_map(mut c: core::ConfigMap) -> Result<Value, ApiError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(c.metadata.take())?))
        .ptr("immutable", c.immutable.take())
        .map("data", std::mem::take(&mut c.data))
        .map(
            "binaryData",
            std::mem::take(&mut c.binary_data)
                .into_iter()
                .map(|(k, v)| (k, b64.encode(v)))
                .collect(),
        );
    rest(c, "ConfigMap")?;
    Ok(o.done())
}

fn secret(mut s: core::Secret) -> Result<Value, ApiError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(s.metadata.take())?))
        .ptr("immutable", s.immutable.take())
        .map(
            "data",
            std::mem::take(&mut s.data)
                .into_iter()
                .map(|(k, v)| (k, b64.encode(v)))
                .collect(),
        )
        .map("stringData", std::mem::take(&mut s.string_data))
        .s("type", s.r#type.take());
    rest(s, "Secret")?;
    Ok(o.done())
}

fn service_account(mut a: core::ServiceAccount) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(a.metadata.take())?));
    let mut secrets = Vec::new();
    for r in std::mem::take(&mut a.secrets) {
        let mut ro = Obj::default();
        ro.s("kind", r.kind)
            .s("namespace", r.namespace)
            .s("name", r.name)
            .s("uid", r.uid)
            .s("apiVersion", r.api_version)
            .s("resourceVersion", r.resource_version)
            .s("fieldPath", r.field_path);
        secrets.push(ro.done());
    }
    o.list("secrets", secrets)
        .list(
            "imagePullSecrets",
            local_refs(std::mem::take(&mut a.image_pull_secrets)),
        )
        .ptr(
            "automountServiceAccountToken",
            a.automount_service_account_token.take(),
        );
    rest(a, "ServiceAccount")?;
    Ok(o.done())
}

fn self_subject_access_review(mut r: authz::SelfSubjectAccessReview) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(r.metadata.take())?));
    let mut spec = r.spec.take().unwrap_or_default();
    let mut so = Obj::default();
    if let Some(mut a) = spec.resource_attributes.take() {
        let mut ao = Obj::default();
        ao.s("namespace", a.namespace.take())
            .s("verb", a.verb.take())
            .s("group", a.group.take())
            .s("version", a.version.take())
            .s("resource", a.resource.take())
            .s("subresource", a.subresource.take())
            .s("name", a.name.take());
        rest(a, "ResourceAttributes")?;
        so.val("resourceAttributes", Some(ao.done()));
    }
    if let Some(mut a) = spec.non_resource_attributes.take() {
        let mut ao = Obj::default();
        ao.s("path", a.path.take()).s("verb", a.verb.take());
        rest(a, "NonResourceAttributes")?;
        so.val("nonResourceAttributes", Some(ao.done()));
    }
    rest(spec, "SelfSubjectAccessReviewSpec")?;
    o.val("spec", Some(so.done()));
    r.status = None;
    rest(r, "SelfSubjectAccessReview")?;
    Ok(o.done())
}

fn self_subject_rules_review(mut r: authz::SelfSubjectRulesReview) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(r.metadata.take())?));
    let mut spec = r.spec.take().unwrap_or_default();
    let mut so = Obj::default();
    so.s("namespace", spec.namespace.take());
    rest(spec, "SelfSubjectRulesReviewSpec")?;
    o.val("spec", Some(so.done()));
    r.status = None;
    rest(r, "SelfSubjectRulesReview")?;
    Ok(o.done())
}

fn self_subject_review(mut r: authn::SelfSubjectReview) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(r.metadata.take())?));
    r.status = None;
    rest(r, "SelfSubjectReview")?;
    Ok(o.done())
}

fn token_request(mut r: authn::TokenRequest) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(r.metadata.take())?));
    let mut spec = r.spec.take().unwrap_or_default();
    let mut so = Obj::default();
    so.list("audiences", strings(std::mem::take(&mut spec.audiences)))
        .ptr("expirationSeconds", spec.expiration_seconds.take());
    if let Some(mut b) = spec.bound_object_ref.take() {
        let mut bo = Obj::default();
        bo.s("kind", b.kind.take())
            .s("apiVersion", b.api_version.take())
            .s("name", b.name.take())
            .s("uid", b.u_id.take());
        rest(b, "BoundObjectReference")?;
        so.val("boundObjectRef", Some(bo.done()));
    }
    rest(spec, "TokenRequestSpec")?;
    o.val("spec", Some(so.done()));
    r.status = None;
    rest(r, "TokenRequest")?;
    Ok(o.done())
}

fn deployment(mut d: apps::Deployment) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(d.metadata.take())?));
    let mut s = d.spec.take().unwrap_or_default();
    let mut so = Obj::default();
    so.ptr("replicas", s.replicas.take())
        .val("selector", label_selector(s.selector.take())?)
        .val("template", Some(pod_template(s.template.take())?));
    let mut strategy = s.strategy.take().unwrap_or_default();
    let mut st = Obj::default();
    st.s("type", strategy.r#type.take());
    if let Some(mut ru) = strategy.rolling_update.take() {
        let mut ro = Obj::default();
        ro.val("maxUnavailable", int_or_string(ru.max_unavailable.take()))
            .val("maxSurge", int_or_string(ru.max_surge.take()));
        rest(ru, "RollingUpdateDeployment")?;
        st.val("rollingUpdate", Some(ro.done()));
    }
    rest(strategy, "DeploymentStrategy")?;
    so.val("strategy", Some(st.done()))
        .n0("minReadySeconds", s.min_ready_seconds.take())
        .ptr("revisionHistoryLimit", s.revision_history_limit.take())
        .b0("paused", s.paused.take())
        .ptr(
            "progressDeadlineSeconds",
            s.progress_deadline_seconds.take(),
        );
    rest(s, "DeploymentSpec")?;
    o.val("spec", Some(so.done()));
    // status is ignored on create (the main resource of a kind with a status subresource).
    d.status.take();
    rest(d, "Deployment")?;
    Ok(o.done())
}

fn job(mut j: batch::Job) -> Result<Value, ApiError> {
    let mut o = Obj::default();
    o.val("metadata", Some(object_meta(j.metadata.take())?));
    let mut s = j.spec.take().unwrap_or_default();
    let mut so = Obj::default();
    so.ptr("parallelism", s.parallelism.take())
        .ptr("completions", s.completions.take())
        .ptr("activeDeadlineSeconds", s.active_deadline_seconds.take())
        .ptr("backoffLimit", s.backoff_limit.take())
        .ptr("backoffLimitPerIndex", s.backoff_limit_per_index.take())
        .ptr("maxFailedIndexes", s.max_failed_indexes.take())
        .val("selector", label_selector(s.selector.take())?)
        .ptr("manualSelector", s.manual_selector.take())
        .val("template", Some(pod_template(s.template.take())?))
        .ptr(
            "ttlSecondsAfterFinished",
            s.ttl_seconds_after_finished.take(),
        )
        .ptr("completionMode", s.completion_mode.take())
        .ptr("suspend", s.suspend.take())
        .ptr("podReplacementPolicy", s.pod_replacement_policy.take())
        .ptr("managedBy", s.managed_by.take());
    rest(s, "JobSpec")?;
    o.val("spec", Some(so.done()));
    j.status.take();
    rest(j, "Job")?;
    Ok(o.done())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut b = MAGIC.to_vec();
        b.extend(u.encode_to_vec());
        b
    }

    fn meta(name: &str) -> Option<meta::ObjectMeta> {
        Some(meta::ObjectMeta {
            name: Some(name.into()),
            // what Go sends for a zero creationTimestamp
            creation_timestamp: Some(meta::Time {
                seconds: Some(-62_135_596_800),
                nanos: Some(0),
            }),
            ..Default::default()
        })
    }

    #[test]
    fn config_map_and_secret() {
        let cm = core::ConfigMap {
            metadata: meta("cm"),
            data: [("a".to_string(), "b".to_string())].into(),
            binary_data: [("bin".to_string(), vec![0u8, 1, 2])].into(),
            ..Default::default()
        };
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "creationTimestamp": null},
                   "data": {"a": "b"}, "binaryData": {"bin": "AAEC"}})
        );
        let s = core::Secret {
            metadata: meta("s"),
            data: [("u".to_string(), b"p".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        assert_eq!(
            decode(&envelope("v1", "Secret", s.encode_to_vec())).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "creationTimestamp": null},
                   "data": {"u": "cA=="}, "type": "Opaque"})
        );
    }

    #[test]
    fn unconverted_fields_and_unknown_kinds_are_415() {
        let pod = core::Pod {
            metadata: meta("p"),
            ..Default::default()
        };
        let e = decode(&envelope("v1", "Pod", pod.encode_to_vec())).unwrap_err();
        assert_eq!((e.code, e.reason), (415, "UnsupportedMediaType"));
        assert!(e.message.contains("for v1 Pod"), "{}", e.message);
        assert!(
            e.message
                .contains("--dry-run=client -o yaml | kubectl apply -f -")
        );
        // A container with a liveness probe: not converted, so refused rather than dropped.
        let d = apps::Deployment {
            metadata: meta("d"),
            spec: Some(apps::DeploymentSpec {
                template: Some(core::PodTemplateSpec {
                    spec: Some(core::PodSpec {
                        containers: vec![core::Container {
                            name: Some("c".into()),
                            liveness_probe: Some(Default::default()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).unwrap_err();
        assert_eq!(e.code, 415);
        assert!(e.message.contains("Container fields"), "{}", e.message);
    }
}
