{{/*
Names. The daemons' objects are <fullname>; the bridge's <fullname>-kube; the watcher's
<fullname>-flink. 63 characters at most (a DNS label), less the suffixes.
*/}}
{{- define "blocklistd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "blocklistd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "blocklistd.bridge.fullname" -}}
{{- printf "%s-kube" (include "blocklistd.fullname" .) }}
{{- end }}

{{- define "blocklistd.flink.fullname" -}}
{{- printf "%s-flink" (include "blocklistd.fullname" .) }}
{{- end }}

{{/* The headless Service that names each daemon pod. */}}
{{- define "blocklistd.peers" -}}
{{- printf "%s-peers" (include "blocklistd.fullname" .) }}
{{- end }}

{{/*
Labels: the recommended ones, and commonLabels. Call with (dict "root" $ "component" BINARY):
`app.kubernetes.io/name` is the binary (blocklistd, blocklist-kube, blocklist-flink), which
the PodMonitors make the `job` the alerts select. The selector labels never change across
upgrades (a selector is immutable).
*/}}
{{- define "blocklistd.selectorLabels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{- define "blocklistd.labels" -}}
{{ include "blocklistd.selectorLabels" . }}
app.kubernetes.io/part-of: blocklistd
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The image of a component: (dict "root" $ "image" .Values.<component>.image). */}}
{{- define "blocklistd.image" -}}
{{- $global := .root.Values.image }}
{{- $repository := default $global.repository .image.repository }}
{{- $tag := default (default .root.Chart.AppVersion $global.tag) .image.tag }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/* The daemons' URL scheme. */}}
{{- define "blocklistd.scheme" -}}
{{- if eq .Values.tls.mode "none" }}http{{ else }}https{{ end }}
{{- end }}

{{/* The Secret of the daemons' certificate, key and CA (tls.mode certManager or existingSecret). */}}
{{- define "blocklistd.tlsSecret" -}}
{{- if eq .Values.tls.mode "existingSecret" }}
{{- required "tls.existingSecret: name the kubernetes.io/tls Secret of the daemons' certificate (tls.mode existingSecret)" .Values.tls.existingSecret }}
{{- else }}
{{- printf "%s-tls" (include "blocklistd.fullname" .) }}
{{- end }}
{{- end }}

{{/* The Secret of the daemons' etcd client certificate. */}}
{{- define "blocklistd.etcdClientSecret" -}}
{{- $client := .Values.store.etcd.clientCertificate }}
{{- if eq $client.mode "existingSecret" }}
{{- required "store.etcd.clientCertificate.existingSecret: name the kubernetes.io/tls Secret of the etcd client certificate" $client.existingSecret }}
{{- else }}
{{- printf "%s-etcd-client" (include "blocklistd.fullname" .) }}
{{- end }}
{{- end }}

{{/* What the bridge and the watcher reach the daemons at: the clients' Service. */}}
{{- define "blocklistd.daemonUrl" -}}
{{- printf "%s://%s.%s.svc:%d" (include "blocklistd.scheme" .) (include "blocklistd.fullname" .) .Release.Namespace (int .Values.port) }}
{{- end }}

{{/*
The environment and volumes by which a client of the daemons (the bridge, the watcher)
verifies them: BLOCKLIST_CACERT from ca.crt of the daemons' TLS Secret, nothing else of it.
*/}}
{{- define "blocklistd.clientCaEnv" -}}
{{- if ne .root.Values.tls.mode "none" }}
- name: BLOCKLIST_CACERT
  value: /etc/{{ .binary }}/daemon-ca/ca.crt
{{- end }}
{{- end }}

{{- define "blocklistd.clientCaMount" -}}
{{- if ne .root.Values.tls.mode "none" }}
- name: daemon-ca
  mountPath: /etc/{{ .binary }}/daemon-ca
  readOnly: true
{{- end }}
{{- end }}

{{- define "blocklistd.clientCaVolume" -}}
{{- if ne .root.Values.tls.mode "none" }}
# The daemons' CA, and nothing else of their Secret.
- name: daemon-ca
  secret:
    secretName: {{ include "blocklistd.tlsSecret" .root }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}

{{/* The container securityContext of the bridge and the watcher (the daemons' is a value). */}}
{{- define "blocklistd.componentSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/*
NetworkPolicy pieces. `blocklistd.peersOrAny`: a rule's `to`/`from` of the peers given,
none (any) when the list is empty. `blocklistd.dnsEgress`: the cluster's DNS.
`blocklistd.toDaemons`: the daemons' API port.
*/}}
{{- define "blocklistd.peersOrAny" -}}
{{- with .peers }}
{{ $.field }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "blocklistd.dnsEgress" -}}
- ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
  {{- include "blocklistd.peersOrAny" (dict "peers" .Values.networkPolicy.dns.to "field" "to") | nindent 2 }}
{{- end }}

{{- define "blocklistd.toDaemons" -}}
- ports:
    - protocol: TCP
      port: {{ .Values.port }}
  to:
    - podSelector:
        matchLabels:
          {{- include "blocklistd.selectorLabels" (dict "root" . "component" "blocklistd") | nindent 10 }}
{{- end }}

{{/* A component's metrics port, open to Prometheus: (dict "root" $ "port" PORT). */}}
{{- define "blocklistd.metricsIngress" -}}
- ports:
    - protocol: TCP
      port: {{ .port }}
  {{- include "blocklistd.peersOrAny" (dict "peers" .root.Values.networkPolicy.prometheus "field" "from") | nindent 2 }}
{{- end }}
