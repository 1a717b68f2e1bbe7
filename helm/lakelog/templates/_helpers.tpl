{{- define "lakelog.name" -}}
{{- printf "%s-%s" .root.Release.Name .role | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lakelog.labels" -}}
app.kubernetes.io/name: lakelog
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "lakelog.selector" -}}
app.kubernetes.io/name: lakelog
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "lakelog.secret" -}}
{{- if .Values.credentials.existingSecret -}}
{{ .Values.credentials.existingSecret }}
{{- else -}}
{{ printf "%s-s3" .Release.Name }}
{{- end -}}
{{- end -}}

{{- define "lakelog.tlsSecret" -}}
{{- default (printf "%s-tls" .Release.Name) .Values.tls.secretName -}}
{{- end -}}

{{/* The headless Service whose names a role's pods advertise under TLS. */}}
{{- define "lakelog.pods" -}}
{{- printf "%s-%s-pods" .root.Release.Name .role | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A listener's `tls:` section (the mounted Secret), one line of flow YAML. */}}
{{- define "lakelog.listenerTls" -}}
{cert: /etc/lakelog/tls/tls.crt, key: /etc/lakelog/tls/tls.key, ca: /etc/lakelog/tls/ca.crt, client_auth: {{ .Values.tls.clientAuth | default "optional" }}}
{{- end -}}

{{/* A role's config file: the schema of deploy/config/<role>.yaml. */}}
{{- define "lakelog.config" -}}
{{- $v := .root.Values -}}
cluster: {{ $v.cluster | quote }}
metadata:
  etcd:
    endpoints: {{ toJson $v.etcd.endpoints }}
    request_timeout: {{ $v.etcd.requestTimeout }}
    {{- if $v.etcd.tls.enabled }}
    tls: {ca: /etc/lakelog/etcd-tls/ca.crt, cert: /etc/lakelog/etcd-tls/tls.crt, key: /etc/lakelog/etcd-tls/tls.key}
    {{- end }}
object_store:
  s3:
    {{- with $v.objectStore.endpoint }}
    endpoint: {{ . | quote }}
    {{- end }}
    bucket: {{ $v.objectStore.bucket | quote }}
    region: {{ $v.objectStore.region | quote }}
    allow_http: {{ $v.objectStore.allowHttp }}
    path_style: {{ $v.objectStore.pathStyle }}
    prefix: {{ $v.objectStore.prefix | quote }}
    credentials: {{ default "keys" $v.credentials.source }}
    {{- if $v.objectStore.caSecret }}
    tls: {ca: /etc/lakelog/s3-ca/ca.crt}
    {{- end }}
telemetry:
  log_level: {{ $v.telemetry.logLevel | quote }}
  log_format: {{ $v.telemetry.logFormat }}
  metrics_listen: {{ printf "0.0.0.0:%v" .r.metricsPort | quote }}
  {{- with $v.telemetry.otlpEndpoint }}
  otlp_endpoint: {{ . | quote }}
  {{- end }}
{{- /* The compactor's and the cleaner's section is `maintenance`. */}}
{{ if has .role (list "catalog" "writer" "reader") }}{{ .role }}{{ else }}maintenance{{ end }}:
  listen: {{ printf "0.0.0.0:%v" .r.port | quote }}
  {{- range $k, $val := .r.config }}
  {{ $k }}: {{ $val | toJson }}
  {{- end }}
  {{- if $v.tls.enabled }}
  tls: {{ include "lakelog.listenerTls" .root }}
  {{- if .r.kafkaPort }}
  kafka:
    listen: {{ printf "0.0.0.0:%v" .r.kafkaPort | quote }}
    tls: {{ include "lakelog.listenerTls" .root }}
  {{- end }}
  {{- end }}
auth:
  enabled: {{ $v.auth.enabled }}
  super_users: {{ toJson $v.auth.superUsers }}
  {{- if and $v.auth.bootstrapSecret (eq .role "catalog") }}
  users_file: /etc/lakelog/auth/users
  tokens_file: /etc/lakelog/auth/tokens
  {{- end }}
{{- end -}}
