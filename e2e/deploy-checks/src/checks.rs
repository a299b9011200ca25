//! The checks every rendering of the installation must pass: the kustomize overlays
//! (`tests/render.rs`) and the Helm chart over its values matrix (`tests/helm.rs`). Each panics
//! with the rendering's name (`overlay`) and what is wrong.

use serde_json::{Value, json};

use crate::{Container, DAEMONS, IMAGE_PREFIX, IMAGE_TAG, NAMESPACE, Rendered, env_value};

/// The lease server's endpoint as the daemons of the ha mode reach it.
pub const LEASE_ENDPOINT: &str = "https://lease-server.cozy-backup-controller.svc:9090";

fn deployments(r: &Rendered) -> Vec<&Value> {
    r.objects("Deployment")
}

fn named<'a>(r: &'a Rendered, kind: &str, name: &str) -> &'a Value {
    r.find(kind, name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The CRDs (ours only), the namespace, and per daemon its Deployment, ServiceAccount, budget,
/// Service and ClusterRoleBinding, in the daemon's namespace.
pub fn installation(r: &Rendered, overlay: &str) {
    let crds: Vec<&str> = r
        .objects("CustomResourceDefinition")
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(crds.len(), 13, "{overlay}: {crds:?}");
    assert!(
        crds.iter().all(|c| c.ends_with(".backups.cozystack.io")),
        "{overlay}: only our own groups, never the platform's ApplicationDefinition: {crds:?}"
    );
    assert_eq!(
        r.objects("Namespace")
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [NAMESPACE],
        "{overlay}: the platform's namespaces are never created (nor deleted) from here"
    );
    for daemon in DAEMONS {
        let d = named(r, "Deployment", daemon);
        let ns = d["metadata"]["namespace"].as_str().unwrap();
        let sa = named(r, "ServiceAccount", daemon);
        assert_eq!(sa["metadata"]["namespace"], ns, "{overlay}/{daemon}");
        assert_eq!(d["spec"]["template"]["spec"]["serviceAccountName"], daemon);
        let pdb = named(r, "PodDisruptionBudget", daemon);
        assert_eq!(pdb["metadata"]["namespace"], ns, "{overlay}/{daemon}");
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"], d["spec"]["selector"]["matchLabels"],
            "{overlay}/{daemon}: the budget covers the Deployment's pods"
        );
        assert!(
            r.objects("Service")
                .iter()
                .any(|s| s["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]),
            "{overlay}/{daemon}: a Service exposes the admin port"
        );
        assert!(
            r.objects("ClusterRoleBinding")
                .iter()
                .any(|b| b["subjects"][0]["name"] == daemon && b["subjects"][0]["namespace"] == ns),
            "{overlay}/{daemon}: bound to its ClusterRole"
        );
    }
}

/// Every pod non-root, read-only, without capabilities, with requests and limits, the project's
/// image and the admin port.
pub fn hardened_pods(r: &Rendered, overlay: &str) {
    for d in deployments(r) {
        let name = d["metadata"]["name"].as_str().unwrap();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        assert!(
            pod["securityContext"]["runAsUser"].as_u64().unwrap_or(0) > 0,
            "{name}"
        );
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"],
            "cozy-backups",
            "{overlay}/{name}: the label the lease server's NetworkPolicy admits"
        );
        let containers = pod["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "{name}");
        let c = &containers[0];
        assert_eq!(
            c["securityContext"],
            json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                   "capabilities": {"drop": ["ALL"]}}),
            "{overlay}/{name}"
        );
        for kind in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c["resources"][kind][resource].is_string(),
                    "{overlay}/{name}: resources.{kind}.{resource}"
                );
            }
        }
        assert_eq!(
            c["image"],
            format!("{IMAGE_PREFIX}{name}:{IMAGE_TAG}"),
            "{overlay}/{name}"
        );
        let container = Container::of(d).unwrap();
        assert_eq!(container.binary, name);
        assert_eq!(env_value(d, "ADMIN_ADDR"), Some("0.0.0.0:8080"), "{name}");
        assert!(
            c["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "admin" && p["containerPort"] == 8080),
            "{overlay}/{name}: the admin port"
        );
    }
}

/// One replica of each daemon, Recreate, LEASE_ENDPOINT=none, evictable budgets, no lease server.
pub fn single_replica(r: &Rendered, overlay: &str) {
    assert_eq!(deployments(r).len(), DAEMONS.len());
    for d in deployments(r) {
        let name = d["metadata"]["name"].as_str().unwrap();
        assert_eq!(d["spec"]["replicas"], 1, "{overlay}/{name}");
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "Recreate"}),
            "{overlay}/{name}"
        );
        assert_eq!(
            env_value(d, "LEASE_ENDPOINT"),
            Some("none"),
            "{overlay}/{name}"
        );
        let budget = named(r, "PodDisruptionBudget", name);
        assert_eq!(
            budget["spec"],
            json!({"maxUnavailable": 1, "selector": d["spec"]["selector"]}),
            "{overlay}/{name}: one replica must stay evictable, or a node never drains"
        );
    }
    let lease_objects: Vec<String> = r
        .objects
        .iter()
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("lease-server"))
        })
        .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
        .collect();
    assert!(lease_objects.is_empty(), "{lease_objects:?}");
    assert!(r.objects("NetworkPolicy").is_empty());
}

/// Two replicas of each daemon on the lease server (TLS, tokens), on different nodes, one always up;
/// one lease server.
pub fn ha(r: &Rendered, overlay: &str) {
    let lease = named(r, "Deployment", "lease-server");
    assert_eq!(
        lease["spec"]["replicas"], 1,
        "leases live in one server's memory"
    );
    assert_eq!(lease["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(
        named(r, "PodDisruptionBudget", "lease-server")["spec"]["maxUnavailable"],
        1
    );
    // The endpoint the daemons use is the lease server's Service, on its gRPC port.
    let service = named(r, "Service", "lease-server");
    let (host, port) = LEASE_ENDPOINT
        .trim_start_matches("https://")
        .split_once(':')
        .unwrap();
    assert_eq!(
        host,
        format!(
            "{}.{}.svc",
            service["metadata"]["name"].as_str().unwrap(),
            service["metadata"]["namespace"].as_str().unwrap()
        )
    );
    assert_eq!(service["spec"]["ports"][0]["port"].to_string(), port);
    assert_eq!(
        env_value(lease, "GRPC_ADDR"),
        Some(format!("0.0.0.0:{port}").as_str())
    );
    // TLS from the Secret lease-server-tls; the only cluster-wide permission is to review tokens.
    let pod = &lease["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "lease-server-tls"
    );
    let tls_dir = pod["containers"][0]["volumeMounts"][0]["mountPath"]
        .as_str()
        .unwrap();
    assert_eq!(
        env_value(lease, "TLS_CERT_FILE"),
        Some(format!("{tls_dir}/tls.crt").as_str())
    );
    assert_eq!(
        env_value(lease, "TLS_KEY_FILE"),
        Some(format!("{tls_dir}/tls.key").as_str())
    );
    assert_eq!(env_value(lease, "INSECURE"), None);
    let review = named(r, "ClusterRole", "cozy-backups-lease-server-tokenreview");
    assert_eq!(
        review["rules"],
        json!([{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}])
    );
    for name in DAEMONS {
        let d = named(r, "Deployment", name);
        assert_eq!(d["spec"]["replicas"], 2, "{overlay}/{name}");
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
            "{overlay}/{name}"
        );
        assert_eq!(
            env_value(d, "LEASE_ENDPOINT"),
            Some(LEASE_ENDPOINT),
            "{overlay}/{name}"
        );
        // Authenticated: the CA and a token for the lease audience, from a projected volume.
        let pod = &d["spec"]["template"]["spec"];
        let mount = &pod["containers"][0]["volumeMounts"][0];
        assert_eq!(mount["name"], "lease-credentials", "{overlay}/{name}");
        let dir = mount["mountPath"].as_str().unwrap();
        assert_eq!(
            env_value(d, "LEASE_TOKEN_FILE"),
            Some(format!("{dir}/token").as_str()),
            "{overlay}/{name}"
        );
        assert_eq!(
            env_value(d, "LEASE_CA_FILE"),
            Some(format!("{dir}/ca.crt").as_str()),
            "{overlay}/{name}"
        );
        let sources = &pod["volumes"][0]["projected"]["sources"];
        assert_eq!(
            sources[0]["serviceAccountToken"]["audience"],
            env_value(lease, "TOKEN_AUDIENCE").unwrap(),
            "{overlay}/{name}"
        );
        assert_eq!(
            sources[1]["configMap"]["name"], "lease-server-ca",
            "{overlay}/{name}"
        );
        let own = json!({"matchLabels": {"app.kubernetes.io/name": name}});
        let anti = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
        assert_eq!(
            anti["requiredDuringSchedulingIgnoredDuringExecution"],
            json!([{"topologyKey": "kubernetes.io/hostname", "labelSelector": own}]),
            "{overlay}/{name}"
        );
        assert_eq!(
            anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"],
            "topology.kubernetes.io/zone",
            "{overlay}/{name}"
        );
        let budget = named(r, "PodDisruptionBudget", name);
        assert_eq!(
            budget["spec"],
            json!({"minAvailable": 1, "selector": d["spec"]["selector"]}),
            "{overlay}/{name}"
        );
    }
}

/// The lease server admits gRPC only from cozy-backups pods, metrics from anywhere.
pub fn ha_network_policy(r: &Rendered, overlay: &str) {
    let policies = r.objects("NetworkPolicy");
    assert_eq!(policies.len(), 1, "{overlay}");
    let p = policies[0];
    assert_eq!(p["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        p["spec"]["podSelector"],
        json!({"matchLabels": {"app.kubernetes.io/name": "lease-server"}})
    );
    assert_eq!(p["spec"]["policyTypes"], json!(["Ingress"]));
    let ingress = p["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2);
    // gRPC: only part-of=cozy-backups pods, in the namespaces the daemons run in.
    assert_eq!(
        ingress[0]["ports"],
        json!([{"protocol": "TCP", "port": 9090}])
    );
    let from = &ingress[0]["from"];
    assert_eq!(from.as_array().unwrap().len(), 1);
    assert_eq!(
        from[0]["podSelector"],
        json!({"matchLabels": {"app.kubernetes.io/part-of": "cozy-backups"}})
    );
    let mut daemon_namespaces: Vec<Value> = DAEMONS
        .iter()
        .map(|d| named(r, "Deployment", d)["metadata"]["namespace"].clone())
        .collect();
    daemon_namespaces.sort_by_key(|v| v.to_string());
    daemon_namespaces.dedup();
    assert_eq!(
        from[0]["namespaceSelector"]["matchExpressions"],
        json!([{"key": "kubernetes.io/metadata.name", "operator": "In",
                "values": daemon_namespaces}])
    );
    // Admin (metrics): from any pod of the cluster.
    assert_eq!(
        ingress[1],
        json!({"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 8080}]})
    );
}
