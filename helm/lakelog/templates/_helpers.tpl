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

{{/* A role's config file: the schema of deploy/config/<role>.yaml. */}}
{{- define "lakelog.config" -}}
{{- $v := .root.Values -}}
cluster: {{ $v.cluster | quote }}
metadata:
  etcd:
    endpoints: {{ toJson $v.etcd.endpoints }}
    request_timeout: {{ $v.etcd.requestTimeout }}
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
{{- end -}}
