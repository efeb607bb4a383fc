// The label counts as a bar chart (Chart.js), so an unbalanced data set shows at a glance.
import { useEffect, useRef } from "preact/hooks";
import { BarController, BarElement, CategoryScale, Chart, LinearScale, Tooltip } from "chart.js";
import type { LabelCount } from "./api";

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Tooltip);

export function LabelChart({ labels, task, canEdit }: { labels: LabelCount[]; task: string; canEdit: boolean }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  useEffect(() => {
    if (!canvas.current || labels.length === 0) return;
    const chart = new Chart(canvas.current, {
      type: "bar",
      data: { labels: labels.map((l) => l.name), datasets: [{ data: labels.map((l) => l.count), backgroundColor: "#3b82f6" }] },
      options: { animation: false, indexAxis: "y", plugins: { legend: { display: false } }, scales: { x: { beginAtZero: true, ticks: { precision: 0 } }, y: { ticks: { autoSkip: false } } }, maintainAspectRatio: false },
    });
    return () => chart.destroy();
  }, [labels]);
  if (labels.length === 0) {
    if (!canEdit) return <p class="muted">{task === "classify" ? "No classes yet." : "No labels yet."}</p>;  // a viewer adds none
    return <p class="muted">{task === "classify" ? "No classes yet: open an image and name its class (or add classes here)." : "No labels yet: open an image, type the first label's name in Next label, then drag around an object (or add labels here)."}</p>;
  }
  return <div class="chart" style={{ height: `${40 + labels.length * 24}px` }}><canvas ref={canvas} /></div>;
}
