{{/*
The labels Helm adds to the top-level metadata of every object, beside the manifests' own
app.kubernetes.io/name and app.kubernetes.io/part-of. Never added to selectors or pod templates,
so an upgrade that changes only the chart version does not roll any pod. docs/helm.md lists them:
they are the only difference from `kubectl kustomize deploy/overlays/<mode>`.
*/}}
{{- define "cozy-backups.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The installation mode: "ha" (deploy/overlays/ha) or "single-replica". */}}
{{- define "cozy-backups.mode" -}}
{{- if not (has .Values.mode (list "ha" "single-replica")) -}}
{{- fail (printf "mode must be ha or single-replica, not %q" (toString .Values.mode)) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end }}

{{/* (list $ "<valuesKey>"): a daemon's replicas, its own value or the mode's (ha 2, single-replica 1). */}}
{{- define "cozy-backups.replicas" -}}
{{- $root := index . 0 -}}
{{- $own := (index $root.Values (index . 1)).replicas -}}
{{- if not (kindIs "invalid" $own) -}}
{{- $own -}}
{{- else if eq (include "cozy-backups.mode" $root) "ha" -}}
2
{{- else -}}
1
{{- end -}}
{{- end }}

{{/*
A daemon's update strategy. ha: RollingUpdate with maxSurge 0 (no spare node needed).
single-replica: Recreate, so an old and a new replica never both believe they lead.
*/}}
{{- define "cozy-backups.strategy" -}}
{{- if eq (include "cozy-backups.mode" .) "ha" -}}
type: RollingUpdate
rollingUpdate:
  maxUnavailable: 1
  maxSurge: 0
{{- else -}}
type: Recreate
{{- end -}}
{{- end }}

{{/*
(list $ "<daemon>"): a daemon's affinity. ha: never two replicas on one node (required), spread
across zones when possible. single-replica: the base's preferred spreading across nodes.
*/}}
{{- define "cozy-backups.affinity" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
podAntiAffinity:
{{- if eq (include "cozy-backups.mode" $root) "ha" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          app.kubernetes.io/name: {{ $name }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: topology.kubernetes.io/zone
        labelSelector:
          matchLabels:
            app.kubernetes.io/name: {{ $name }}
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            app.kubernetes.io/name: {{ $name }}
{{- end }}
{{- end }}

{{/* A daemon's disruption budget: ha keeps one replica up, single-replica lets its one pod go. */}}
{{- define "cozy-backups.budget" -}}
{{- if eq (include "cozy-backups.mode" .) "ha" -}}
minAvailable: 1
{{- else -}}
maxUnavailable: 1
{{- end -}}
{{- end }}

{{/* LEASE_ENDPOINT of every daemon: the lease server's Service (ha) or none (single-replica). */}}
{{- define "cozy-backups.leaseEndpoint" -}}
{{- if eq (include "cozy-backups.mode" .) "ha" -}}
https://lease-server.cozy-backup-controller.svc:9090
{{- else -}}
none
{{- end -}}
{{- end }}

{{/*
(list $ "<image name>" "<valuesKey>"): a daemon's image: <daemon>.image when set, else
<image.registry>/<image name>:<image.tag>, with @<digest> when <daemon>.digest is set.
*/}}
{{- define "cozy-backups.image" -}}
{{- $root := index . 0 -}}
{{- $own := index $root.Values (index . 2) -}}
{{- if $own.image -}}
{{- $own.image -}}
{{- else -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $root.Values.image.registry) (index . 1) (toString $root.Values.image.tag) -}}
{{- with $own.digest }}@{{ . }}{{ end -}}
{{- end -}}
{{- end }}

{{/*
(list $ <object>): an object read from files/ (CRDs, monitoring), with the Helm labels added
and, with a third element, the annotations merged in.
*/}}
{{- define "cozy-backups.fileObject" -}}
{{- $root := index . 0 -}}
{{- $obj := index . 1 -}}
{{- $labels := merge (fromYaml (include "cozy-backups.labels" $root)) ($obj.metadata.labels | default dict) -}}
{{- $_ := set $obj.metadata "labels" $labels -}}
{{- if gt (len .) 2 -}}
{{- $_ := set $obj.metadata "annotations" (merge (index . 2) ($obj.metadata.annotations | default dict)) -}}
{{- end -}}
{{- toYaml $obj -}}
{{- end }}
