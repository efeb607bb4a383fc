{{/* The labels every hand-written object carries (the generated ones carry the same three). */}}
{{- define "forklift.labels" -}}
app.kubernetes.io/name: forklift
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/instance: {{ .name }}
{{- end }}

{{/* The Secret whose key `url` holds the PostgreSQL URL, or "" for SQLite on the app's volume. */}}
{{- define "forklift.databaseSecret" -}}
{{- if .Values.postgresql.bundled -}}
{{ printf "%s-postgresql" .Release.Name }}
{{- else -}}
{{ .Values.postgresql.existingSecret }}
{{- end -}}
{{- end }}

{{/* A value kept across upgrades: the one in the existing Secret, else a new random one. */}}
{{- define "forklift.keptSecret" -}}
{{- $existing := lookup "v1" "Secret" .namespace .secret -}}
{{- if and $existing (index $existing.data .key) -}}
{{ index $existing.data .key | b64dec }}
{{- else -}}
{{ randAlphaNum 24 }}
{{- end -}}
{{- end }}

{{/* A PersistentVolumeClaim's spec. */}}
{{- define "forklift.claimSpec" -}}
accessModes: [ReadWriteOnce]
{{- with .storageClassName }}
storageClassName: {{ . }}
{{- end }}
resources:
  requests:
    storage: {{ .size }}
{{- end }}

{{/* The app's environment: the first administrator, and the database URL when there is a server. */}}
{{- define "forklift.appEnv" -}}
- name: ADMIN_NAME
  valueFrom: {secretKeyRef: {name: {{ .name }}, key: admin-name}}
- name: ADMIN_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .name }}, key: admin-password}}
{{- include "forklift.databaseEnv" .database }}
{{- end }}

{{/* FORKLIFT_DB from the database Secret's `url`, when there is one. */}}
{{- define "forklift.databaseEnv" -}}
{{- if . }}
- name: FORKLIFT_DB
  valueFrom: {secretKeyRef: {name: {{ . }}, key: url}}
{{- end }}
{{- end }}
