// esbuild bundles .css imports as text (--loader:.css=text): <clef-chat> puts it in its shadow root.
declare module '*.css' {
  const css: string;
  export default css;
}
