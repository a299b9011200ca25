//! `cozystack.io/v1alpha1` ApplicationDefinition: one tenant-facing application kind.
//!
//! Cluster-scoped, no status. This is the wire view (absent optional blocks stay absent). The
//! apidef-restarter's config hash does not serialise this type: `libs/appdef` mirrors upstream's Go
//! structs (field order, `{}` for the non-pointer blocks) to reproduce upstream's hash input.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// ApplicationDefinition declares one application kind of the aggregated `apps.cozystack.io` API.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cozystack.io",
    version = "v1alpha1",
    kind = "ApplicationDefinition",
    plural = "applicationdefinitions",
    derive = "PartialEq",
    derive = "Default",
    doc = "ApplicationDefinition declares one tenant-facing application kind.",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.application.kind"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDefinitionSpec {
    /// The tenant-facing kind.
    pub application: ApplicationDefinitionApplication,
    /// How instances become HelmReleases.
    pub release: ApplicationDefinitionRelease,
    /// Which Secrets of an instance tenants can see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<ApplicationDefinitionResources>,
    /// Which Services of an instance tenants can see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<ApplicationDefinitionResources>,
    /// Which Ingresses of an instance tenants can see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingresses: Option<ApplicationDefinitionResources>,
    /// Dashboard presentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dashboard: Option<ApplicationDefinitionDashboard>,
}

/// The tenant-facing kind of an ApplicationDefinition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDefinitionApplication {
    /// Kind, e.g. `HTTPCache`. Not derivable from `metadata.name` (`http-cache`).
    pub kind: String,
    /// JSON schema of the application's values, as a string.
    #[serde(rename = "openAPISchema")]
    pub open_api_schema: String,
    /// Plural resource name, e.g. `httpcaches`.
    pub plural: String,
    /// Singular resource name, e.g. `httpcache`.
    pub singular: String,
}

/// How instances become HelmReleases.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDefinitionRelease {
    /// Chart source.
    pub chart_ref: ChartRef,
    /// Labels added to every HelmRelease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Release name prefix (release = prefix + instance name).
    #[schemars(regex(pattern = r"^[a-z0-9-]*$"))]
    pub prefix: String,
    /// Health-check strategy of the HelmRelease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_strategy: Option<WaitStrategy>,
    /// Custom health checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_exprs: Option<Vec<HealthCheckExpr>>,
}

/// helm-controller v2 cross-namespace source reference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartRef {
    /// API version of the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Source kind.
    pub kind: ChartSourceKind,
    /// Source name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Source namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// Kinds of chart sources.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ChartSourceKind {
    /// An OCIRepository.
    #[default]
    OCIRepository,
    /// A HelmChart.
    HelmChart,
    /// An ExternalArtifact.
    ExternalArtifact,
}

/// HelmRelease wait strategy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WaitStrategy {
    /// kstatus poller.
    Poller,
    /// Helm's legacy wait.
    Legacy,
}

/// A custom health check.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    /// API version of the checked objects.
    pub api_version: String,
    /// Kind of the checked objects.
    pub kind: String,
    /// CEL expression that holds when the object is current.
    pub current: String,
    /// CEL expression that holds while the object is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    /// CEL expression that holds when the object failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// Include/exclude selectors of tenant-visible resources.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDefinitionResources {
    /// Resources excluded even when included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<ResourceSelector>>,
    /// Resources visible to tenants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<ResourceSelector>>,
}

/// A label selector plus optional name templates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// Label equality requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Label set-based requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions:
        Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>>,
    /// Go-template names (`{{ .name }}`, `{{ .kind }}`, `{{ .namespace }}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_names: Option<Vec<String>>,
}

/// Dashboard presentation of an application kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDefinitionDashboard {
    /// Menu category.
    pub category: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Plural display name.
    pub plural: String,
    /// Singular display name.
    pub singular: String,
    /// Whether only one instance may exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub singular_resource: Option<bool>,
    /// Sort weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Icon (data URI or name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// Tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Tabs shown on the instance page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tabs: Option<Vec<DashboardTab>>,
    /// Order of keys in the values form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_order: Option<Vec<Vec<String>>>,
    /// Whether the application is a module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<bool>,
}

/// Dashboard tabs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DashboardTab {
    /// Workloads tab.
    Workloads,
    /// Ingresses tab.
    Ingresses,
    /// Services tab.
    Services,
    /// Secrets tab.
    Secrets,
    /// YAML tab.
    Yaml,
}
