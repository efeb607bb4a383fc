import type { DataSet, LabelCount } from "./api";

// Label colours: a label keeps the colour of its place in the data set's list (creation order), so the editor's
// shapes, their captions and the label list agree. Hues step by the golden angle, which keeps neighbours apart.
export function labelColour(index: number): `#${string}` {
  const hue = (index * 137.508 + 210) % 360, saturation = 0.72, lightness = 0.5;
  const f = (n: number) => {
    const k = (n + hue / 30) % 12;
    const value = lightness - saturation * Math.min(lightness, 1 - lightness) * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(value * 255).toString(16).padStart(2, "0");
  };
  return `#${f(0)}${f(8)}${f(4)}`;
}

// The colour of a label by name: its place in `names`, or the next free place for a name not saved yet.
export function colourOf(names: string[], name: string): `#${string}` {
  const index = names.indexOf(name);
  return labelColour(index >= 0 ? index : names.length);
}

// A label as the set holds it now, by the id a page loaded it with: the same label (renamed or not), or the one it
// was merged into (the server keeps each merge's record pointing at the label its uses are in now); none: deleted.
export function labelNow(set: DataSet, id: number): LabelCount | undefined {
  const into = set.merges.find((merge) => merge.label_id === id)?.into_id;
  return set.labels.find((label) => label.id === id) ?? set.labels.find((label) => label.id === into);
}
