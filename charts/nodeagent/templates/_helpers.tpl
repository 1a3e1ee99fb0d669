{{/*
Names. Release "nodeagent" (or fullnameOverride: nodeagent) gives the kustomize trees'
names; any other release name is prefixed, so two releases never share a cluster-scoped
name.
*/}}
{{- define "nodeagent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nodeagent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nodeagent.agentName" -}}{{ include "nodeagent.fullname" . }}{{- end }}
{{- define "nodeagent.schedulerName" -}}{{ include "nodeagent.fullname" . }}-scheduler{{- end }}
{{- define "nodeagent.extenderName" -}}{{ include "nodeagent.fullname" . }}-extender{{- end }}

{{- define "nodeagent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Labels. Every object carries Helm's standard labels besides the kustomize trees' own
(app.kubernetes.io/name and component); selectors add the release's instance, so the
pods of two releases are never confused. The chart's version stays out of pod templates:
upgrading the chart alone rolls no pod.
*/}}
{{- define "nodeagent.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
{{- end }}

{{- define "nodeagent.selector" -}}
app.kubernetes.io/name: {{ include "nodeagent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nodeagent.agentSelector" -}}
{{ include "nodeagent.selector" . }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "nodeagent.extenderSelector" -}}
{{ include "nodeagent.selector" . }}
app.kubernetes.io/component: extender
{{- end }}

{{/* The scheduler's objects are named as a separate application, as in manifests/scheduler. */}}
{{- define "nodeagent.schedulerSelector" -}}
app.kubernetes.io/name: {{ include "nodeagent.name" . }}-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{/* Metadata labels: of an object without a component (RBAC, the policy, the quota)... */}}
{{- define "nodeagent.labels" -}}
{{ include "nodeagent.selector" . }}
{{ include "nodeagent.releaseLabels" . }}
{{- end }}

{{/* ...and of each component's objects. */}}
{{- define "nodeagent.agentLabels" -}}
{{ include "nodeagent.agentSelector" . }}
{{ include "nodeagent.releaseLabels" . }}
{{- end }}

{{- define "nodeagent.extenderLabels" -}}
{{ include "nodeagent.extenderSelector" . }}
{{ include "nodeagent.releaseLabels" . }}
{{- end }}

{{- define "nodeagent.schedulerLabels" -}}
{{ include "nodeagent.schedulerSelector" . }}
{{ include "nodeagent.releaseLabels" . }}
{{- end }}

{{/* The scheduler's RBAC and namespace: the application label without a component. */}}
{{- define "nodeagent.schedulerAppLabels" -}}
app.kubernetes.io/name: {{ include "nodeagent.name" . }}-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "nodeagent.releaseLabels" . }}
{{- end }}

{{/*
The agent's configuration file: .Values.config with what the chart's own switches imply.
Refuses combinations that would only fail on the nodes.
*/}}
{{- define "nodeagent.agentConfig" -}}
{{- $config := deepCopy .Values.config }}
{{- if hasKey $config "hostRoot" }}
{{- fail "config.hostRoot: the chart sets it (--host-root=/host, where the DaemonSet mounts the host's paths); remove it" }}
{{- end }}
{{- if .Values.agent.cgroupNotifications }}
{{- $_ := set $config "kernelMemcgNotification" true }}
{{- else }}
{{- if $config.kernelMemcgNotification }}
{{- fail "config.kernelMemcgNotification: true needs agent.cgroupNotifications: true (cgroup v1 memory thresholds write cgroup.event_control, and the host cgroupfs is mounted read-only otherwise)" }}
{{- end }}
{{- range $config.psiTriggers }}
{{- if contains "/" (toString .) }}
{{- fail (printf "config.psiTriggers: %q is a cgroup's PSI trigger, which needs agent.cgroupNotifications: true (it writes the cgroup's pressure file, and the host cgroupfs is mounted read-only otherwise)" (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.agent.tls.secretName }}
{{- if or $config.tlsCertFile $config.tlsPrivateKeyFile }}
{{- fail "agent.tls.secretName sets config.tlsCertFile and config.tlsPrivateKeyFile: give one or the other" }}
{{- end }}
{{- $_ := set $config "tlsCertFile" "/etc/nodeagent-tls/tls.crt" }}
{{- $_ := set $config "tlsPrivateKeyFile" "/etc/nodeagent-tls/tls.key" }}
{{- end }}
{{- with .Values.agent.tls.clientCAConfigMap }}
{{- if $config.clientCAFile }}
{{- fail "agent.tls.clientCAConfigMap sets config.clientCAFile: give one or the other" }}
{{- end }}
{{- $_ := set $config "clientCAFile" "/etc/nodeagent-client-ca/ca.crt" }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The agent's metrics port, from config.metricsAddress (HOST:PORT). */}}
{{- define "nodeagent.agentPort" -}}
{{- $port := regexFind "[0-9]+$" (toString .Values.config.metricsAddress) | default "0" | atoi }}
{{- if or (lt $port 1) (gt $port 65535) }}
{{- fail (printf "config.metricsAddress %q: the DaemonSet needs a fixed port (1-65535) to probe and scrape" (toString .Values.config.metricsAddress)) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
HTTP or HTTPS, as the server decides: HTTPS unless authentication is off and no
certificate is given (metricsAuth unset means kubernetes in a cluster).
*/}}
{{- define "nodeagent.scheme" -}}
{{- if and (eq (toString .auth) "none") (not .certificate) }}HTTP{{ else }}HTTPS{{ end }}
{{- end }}

{{- define "nodeagent.agentScheme" -}}
{{- include "nodeagent.scheme" (dict "auth" .Values.config.metricsAuth "certificate" (or .Values.agent.tls.secretName .Values.config.tlsCertFile)) }}
{{- end }}

{{/* The scheduler's namespace: its own (made by the chart if asked) or the release's. */}}
{{- define "nodeagent.schedulerNamespace" -}}
{{- .Values.scheduler.namespace | default .Release.Namespace }}
{{- end }}

{{/* The scheduler's KubeSchedulerConfiguration: its Lease in its own namespace by default. */}}
{{- define "nodeagent.schedulerConfig" -}}
{{- $config := deepCopy .Values.scheduler.config }}
{{- $election := $config.leaderElection | default dict }}
{{- if not $election.resourceNamespace }}
{{- $_ := set $election "resourceNamespace" (include "nodeagent.schedulerNamespace" .) }}
{{- end }}
{{- $_ := set $config "leaderElection" $election }}
{{- toYaml $config }}
{{- end }}
