{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "xpushare.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "xpushare.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "xpushare.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "xpushare.labels" -}}
helm.sh/chart: {{ include "xpushare.chart" . }}
app.kubernetes.io/name: {{ include "xpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: xpushare
{{- end -}}

{{/* Selector labels for one component: include with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "xpushare.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xpushare.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "xpushare.image" -}}
{{- $repository := required "image.repository is required: the repository you pushed the XPUShare image to, e.g. --set image.repository=registry.example.com/xpushare/xpushare (no public image is published; docs/install.md says how to build and push it)" .Values.image.repository -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}

{{/* Pod-level scheduling and runtime settings shared by both DaemonSets.
     Include with (dict "ctx" $ "c" .Values.scheduler); a component's own nodeSelector, affinity
     and tolerations replace the global ones when set. */}}
{{- define "xpushare.podPlacement" -}}
{{- $v := .ctx.Values -}}
{{- $nodeSelector := .c.nodeSelector | default $v.nodeSelector -}}
{{- $affinity := .c.affinity | default $v.affinity -}}
{{- $tolerations := .c.tolerations | default $v.tolerations -}}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
