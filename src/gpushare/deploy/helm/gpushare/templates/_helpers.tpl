{{- define "gpushare.labels" -}}
app.kubernetes.io/name: gpushare
app.kubernetes.io/part-of: gpushare
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "gpushare.probes" -}}
livenessProbe:
  httpGet: {path: /livez, port: health}
  initialDelaySeconds: 15
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: health}
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}
